"""Servers for the conformance tests; one process per configuration, shared by a module/session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.server import RunningServer, serve

# Long enough for the resume tests to reconnect, short enough to test expiry quickly.
RESUME_GRACE_S = 1.0
# Small enough that the size tests send little data.
MAX_MESSAGE_BYTES = 16384


@pytest.fixture(scope="session")
def counter_server() -> Iterator[RunningServer]:
    """The typed counter env with generous capacity; shared by most tests."""
    env = {
        "MAX_CONCURRENT_ENVS": "64",
        "OPENENV_RESUME_GRACE": str(RESUME_GRACE_S),
        "OPENENV_MAX_MESSAGE_BYTES": str(MAX_MESSAGE_BYTES),
        "OPENENV_SESSION_TIMEOUT": "",
    }
    with serve("apps.counter:app", env=env) as server:
        yield server


@pytest.fixture(scope="session")
def echo_server() -> Iterator[RunningServer]:
    with serve("echo_env.server.app:app", env={"MAX_CONCURRENT_ENVS": "8"}) as server:
        yield server
