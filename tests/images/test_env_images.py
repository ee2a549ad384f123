"""Every reference environment builds into an image that passes the server checker, playing
the sample actions it declares, in a hardened container (read-only root, no-new-privileges)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from openenv.testing import check_server
from tests.support.server import REPO

from .conftest import published_url, run_hardened, wait_for_health

OPENENV = str(Path(sys.executable).with_name("openenv"))
# echo has its own, more detailed image tests in test_build.py.
ENVS = sorted(path.name for path in (REPO / "envs").iterdir() if (path / "openenv.yaml").is_file())
ENVS.remove("echo_env")

pytestmark = pytest.mark.slow


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
    container = run_hardened(docker_client, tag)
    try:
        url = published_url(container)
        wait_for_health(container, url)
        # Environments whose legal actions a schema cannot tell declare examples (docs/testing.md).
        report = check_server(url, raise_on_failure=False)
        assert report.ok, str(report)
    finally:
        container.remove(force=True)
        docker_client.images.remove(tag, force=True)
