"""Real environment servers for the trainer adapter tests (loopback uvicorn, real WebSocket
frames), and a policy that answers the math environment's questions."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.support.server import RunningServer, serve


@pytest.fixture(scope="module")
def math_url() -> Iterator[str]:
    with serve("math_env.server.app:app") as server:
        yield server.url


@pytest.fixture(scope="module")
def echo_url() -> Iterator[str]:
    with serve("echo_env.server.app:app") as server:
        yield server.url


@pytest.fixture
def doomed_server() -> Iterator[RunningServer]:
    """A math server in its own process, for the test to kill mid-episode."""
    with serve("math_env.server.app:app", in_process=False) as server:
        yield server


def kill(server: RunningServer) -> None:
    assert server.process is not None
    server.process.kill()
    server.process.wait(timeout=30)


def solve(text: str) -> str:
    """The right answer to the last "What is a + b?" in `text`."""
    a, b = re.findall(r"What is (\d+) \+ (\d+)\?", text)[-1]
    return str(int(a) + int(b))


@pytest.fixture
def dead_url() -> str:
    """A loopback port nothing listens on."""
    from openenv.testing.live_server import free_port

    return f"http://127.0.0.1:{free_port()}"
