"""Real environment servers (in-process uvicorn on loopback, real WebSocket frames) shared by
the rollout and collect tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.server import serve


@pytest.fixture(scope="module")
def echo_url() -> Iterator[str]:
    with serve("echo_env.server.app:app") as server:
        yield server.url


@pytest.fixture(scope="module")
def connect4_url() -> Iterator[str]:
    with serve("connect4_env.server.app:app") as server:
        yield server.url


@pytest.fixture(scope="module")
def math_url() -> Iterator[str]:
    with serve("math_env.server.app:app") as server:
        yield server.url


@pytest.fixture
def dead_url() -> str:
    """A loopback port nothing listens on: the environment is unreachable."""
    from openenv.testing.live_server import free_port

    return f"http://127.0.0.1:{free_port()}"
