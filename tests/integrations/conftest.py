"""Real environment servers for the trainer adapter tests (loopback uvicorn, real WebSocket
frames), and a policy that answers the math environment's questions.

Collecting test_trl.py imports torch, transformers and TRL (seconds of CPU); its tests are all
`slow`, so a run whose `-m` deselects `slow` (the default) does not collect it at all."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

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


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if collection_path.name != "test_trl.py":
        return None
    markexpr = config.getoption("markexpr") or ""
    try:  # pytest's own evaluator of -m expressions (private: collect normally without it)
        from _pytest.mark.expression import Expression
    except ImportError:
        return None
    if not markexpr:
        return None
    selects_slow = Expression.compile(markexpr).evaluate(lambda name, **kwargs: name == "slow")
    return True if not selects_slow else None
