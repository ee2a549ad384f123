"""Worker threads of a burst of blocking sync steps exit once idle, and the server keeps serving."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator

import pytest

from tests.support.server import RunningServer, serve

from .conftest import server_env
from .helpers import assert_observation_frame, recv, request, send, ws_connect

BURST = 6  # steps that block at once, each on its own pool thread


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    env = {
        "OPENENV_THREAD_IDLE_S": "0.2",
        "MAX_CONCURRENT_ENVS": "16",
        "SLOW_STEP_MS": "0",
    }
    with serve("apps.slow:app", env=server_env(env), in_process=True) as running:
        yield running


def _pool_threads() -> set[threading.Thread]:
    """The servers' pool threads in this process (the express worker, `-x`, stays for good)."""
    return {
        t
        for t in threading.enumerate()
        if t.name.startswith("openenv-env-") and not t.name.startswith("openenv-env-x")
    }


async def _until_gone(threads: set[threading.Thread]) -> None:
    for _ in range(6000):  # a bound only a pool that never shrinks reaches
        if not any(t.is_alive() for t in threads):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{sum(t.is_alive() for t in threads)} idle pool threads never exited")


async def test_a_burst_of_blocking_steps_leaves_no_idle_threads_behind(
    server: RunningServer,
) -> None:
    before = _pool_threads()
    conns = [await ws_connect(server.ws_url).__aenter__() for _ in range(BURST)]
    try:
        for ws in conns:
            assert_observation_frame(await request(ws, {"type": "reset"}))
        for round_ in range(2):  # a second burst after the first one's threads retired
            meeting = f"burst-{uuid.uuid4()}"
            for i, ws in enumerate(conns):
                await send(
                    ws,
                    {"type": "step", "data": {"tag": f"s{i}", "meet": meeting, "parties": BURST}},
                )
            for i, ws in enumerate(conns):
                observation = assert_observation_frame(await recv(ws))["observation"]
                assert observation["tag"] == f"s{i}", (round_, observation)
            burst_threads = _pool_threads() - before
            assert len(burst_threads) >= BURST - 1  # the steps overlapped: one thread each
            await _until_gone(burst_threads)
        # The sessions are still usable after their threads left.
        step = {"type": "step", "data": {"tag": "after"}}
        assert assert_observation_frame(await request(conns[0], step))["observation"]["tag"] == (
            "after"
        )
    finally:
        for ws in conns:
            await ws.close()
