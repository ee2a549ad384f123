"""Fixtures of the provider tests that need a Docker engine (run with `pytest -m docker`).

The echo environment's image is built once per session with `openenv build` (wheels made on
the host, the base image made locally: nothing is pulled) and removed at the end.
`OPENENV_TEST_ECHO_IMAGE=tag` uses an image already built from this checkout instead.

Outside CI a machine without an engine skips these tests; in CI (`CI=true`) it fails them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.docker_engine import engine_client
from tests.support.server import REPO

OPENENV = str(Path(sys.executable).with_name("openenv"))
#: A build on a loaded 2-core machine takes minutes, past the suite's 120 s default.
DOCKER_TEST_TIMEOUT_S = 1200


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("docker") is not None:
            item.add_marker(pytest.mark.timeout(DOCKER_TEST_TIMEOUT_S))


@pytest.fixture(scope="session")
def docker_client() -> Iterator[Any]:
    yield from engine_client()


@pytest.fixture(scope="session")
def echo_image(docker_client: Any) -> Iterator[str]:
    """The echo environment's image, built from this checkout."""
    given = os.environ.get("OPENENV_TEST_ECHO_IMAGE")
    if given:
        yield given
        return
    tag = f"openenv-echo:providers-{uuid.uuid4().hex[:8]}"
    result = subprocess.run(
        [OPENENV, "build", str(REPO / "envs" / "echo_env"), "--tag", tag],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    yield tag
    docker_client.images.remove(tag, force=True)


@pytest.fixture(scope="session")
def swarm(docker_client: Any) -> Iterator[None]:
    """A single-node swarm, made by the provider's `auto_init_swarm` when the engine is in
    none (and left again at the end)."""
    from openenv.providers.swarm import DockerSwarmProvider

    made = not DockerSwarmProvider.swarm_active()
    DockerSwarmProvider(auto_init_swarm=True).ensure_swarm()
    assert DockerSwarmProvider.swarm_active()
    yield
    if made:
        docker_client.swarm.leave(force=True)
