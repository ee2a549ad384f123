"""`openenv build` on environments in OpenEnv's flat layout: a folder made by the published
package's `openenv init`, one made by ours, and the echo environment in OpenEnv's layout each
build into an image whose server plays an episode with our client and the published one."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.compat.compat_venv import ensure_compat_venv
from tests.compat.conftest import OUR_PYTHON
from tests.compat.layout_envs import (
    OUR_OPENENV,
    LayoutEnv,
    check_episode,
    echo_copy,
    our_init,
    play,
    published_init,
)

from .conftest import published_url, run_hardened, wait_for_health

pytestmark = [pytest.mark.slow, pytest.mark.compat]


def _make(kind: str, out: Path) -> tuple[LayoutEnv, list[str]]:
    if kind == "published":
        # OpenEnv's server/Dockerfile installs uv and the dependencies from the network while
        # building; the template builds from the wheels `openenv build` prepares.
        return published_init(ensure_compat_venv(), out), ["--use-template"]
    if kind == "ours":
        return our_init(out), []  # its server/Dockerfile is the template
    return echo_copy(out), []  # no Dockerfile: the template


@pytest.mark.parametrize("kind", ["published", "ours", "echo"])
def test_the_image_serves_an_episode_to_both_clients(
    docker_client: Any, tmp_path: Path, kind: str
) -> None:
    env, options = _make(kind, tmp_path)
    tag = f"openenv-test-layout-{kind}:latest"
    result = subprocess.run(
        [OUR_OPENENV, "build", str(env.root), "--tag", tag, *options],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    container = run_hardened(docker_client, tag)
    try:
        url = published_url(container)
        wait_for_health(container, url)
        check_episode(env, play(OUR_PYTHON, env, url))
        check_episode(env, play(ensure_compat_venv(), env, url))
    finally:
        container.remove(force=True)
        docker_client.images.remove(tag, force=True)
