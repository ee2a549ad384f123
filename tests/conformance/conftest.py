"""Servers for the conformance tests; one process per configuration, shared by a module/session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.server import RunningServer, serve

# Long enough for the resume tests to reconnect, short enough to test expiry quickly.
RESUME_GRACE_S = 1.0
# Small enough that the size tests send little data.
MAX_MESSAGE_BYTES = 16384


@pytest.fixture(scope="session")
def close_marker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """File the counter env appends its episode id to on close()."""
    path = tmp_path_factory.mktemp("markers") / "closed.txt"
    path.touch()
    return path


def closed_episodes(marker: Path) -> list[str]:
    return marker.read_text(encoding="utf-8").split()


@pytest.fixture(scope="session")
def counter_server(close_marker: Path) -> Iterator[RunningServer]:
    """The typed counter env with generous capacity; shared by most tests."""
    env = {
        "MAX_CONCURRENT_ENVS": "64",
        "OPENENV_RESUME_GRACE": str(RESUME_GRACE_S),
        "OPENENV_MAX_MESSAGE_BYTES": str(MAX_MESSAGE_BYTES),
        "OPENENV_SESSION_TIMEOUT": "",
        "OPENENV_TEST_CLOSE_MARKER": str(close_marker),
    }
    with serve("apps.counter:app", env=env) as server:
        yield server


@pytest.fixture(scope="session")
def echo_server() -> Iterator[RunningServer]:
    with serve("echo_env.server.app:app", env={"MAX_CONCURRENT_ENVS": "8"}) as server:
        yield server
