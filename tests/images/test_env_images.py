"""Every reference environment builds into an image that passes the server checker."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from openenv.testing import check_server
from openspiel_env import OpenSpielAction
from tests.support.server import REPO

from .conftest import published_url, wait_for_health

OPENENV = str(Path(sys.executable).with_name("openenv"))
# echo has its own, more detailed image tests in test_build.py.
ENVS = sorted(path.name for path in (REPO / "envs").iterdir() if (path / "openenv.yaml").is_file())
ENVS.remove("echo_env")

pytestmark = pytest.mark.slow


def _openspiel_line() -> list[dict[str, Any]]:
    """A whole legal game of the default game as player 0, so every sample is legal."""
    from openspiel_env.server.openspiel_environment import OpenSpielEnvironment

    env = OpenSpielEnvironment()
    obs, line = env.reset(seed=0), []
    while not obs.done:
        line.append({"action_id": obs.legal_actions[-1]})
        obs = env.step(OpenSpielAction(**line[-1]))
    return line


# Environments whose valid actions the schema cannot tell (ranges, legal moves, word games).
SAMPLES: dict[str, Callable[[], list[dict[str, Any]]]] = {
    "gymnasium_env": lambda: [{"action": 0}],
    "openspiel_env": _openspiel_line,
    "textarena_env": lambda: [{"message": f"[{word}]"} for word in ("crane", "about", "water")],
}


@pytest.mark.parametrize("env_dir", ENVS)
def test_image_builds_and_serves(docker_client: Any, env_dir: str) -> None:
    tag = f"openenv-test-{env_dir.replace('_', '-')}:latest"
    result = subprocess.run(
        [OPENENV, "build", str(REPO / "envs" / env_dir), "--tag", tag],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    container = docker_client.containers.run(
        tag, detach=True, ports={"8000/tcp": ("127.0.0.1", None)}
    )
    try:
        url = published_url(container)
        wait_for_health(container, url)
        samples = SAMPLES[env_dir]() if env_dir in SAMPLES else None
        report = check_server(url, sample_actions=samples, raise_on_failure=False)
        assert report.ok, str(report)
    finally:
        container.remove(force=True)
        docker_client.images.remove(tag, force=True)
