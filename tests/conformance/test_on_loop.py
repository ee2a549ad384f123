"""`Environment.RUNS_ON_EVENT_LOOP`: sync calls on the server's event loop, over real sockets.

The opt-in only moves where the server calls reset/step/state; everything a client sees stays
the same: typed errors that leave the session usable, ordered replies per session, several
sessions served side by side. What it gives up (deadlines, other sessions during a slow call)
is documented in docs/scaling.md, and is why it is off by default.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection

from tests.apps.counter import UNLUCKY
from tests.support.server import RunningServer, serve

from .helpers import assert_error, assert_observation_frame, request, ws_connect


@pytest.fixture(scope="module")
def on_loop_server() -> Iterator[RunningServer]:
    with serve("tests.apps.on_loop:app") as server:
        yield server


@pytest.fixture(scope="module")
def threaded_server() -> Iterator[RunningServer]:
    with serve("tests.apps.on_loop:threaded_app") as server:
        yield server


async def _step(ws: ClientConnection, amount: int) -> dict[str, Any]:
    return assert_observation_frame(await request(ws, {"type": "step", "data": {"amount": amount}}))


async def test_sync_calls_run_on_the_loop_only_when_the_env_opts_in(
    on_loop_server: RunningServer, threaded_server: RunningServer
) -> None:
    for server, on_loop in ((on_loop_server, True), (threaded_server, False)):
        async with ws_connect(server.ws_url) as ws:
            reset = assert_observation_frame(await request(ws, {"type": "reset", "data": {}}))
            assert reset["observation"]["metadata"]["on_loop"] is on_loop
            step = await _step(ws, 2)
            assert step["observation"]["metadata"]["on_loop"] is on_loop


async def test_errors_leave_the_session_and_the_server_serving(
    on_loop_server: RunningServer,
) -> None:
    async with ws_connect(on_loop_server.ws_url) as ws:
        await request(ws, {"type": "reset", "data": {}})
        assert (await _step(ws, 1))["observation"]["count"] == 1
        failed = await request(ws, {"type": "step", "data": {"amount": UNLUCKY}})
        assert_error(failed, "EXECUTION_ERROR")
        invalid = await request(ws, {"type": "step", "data": {"amount": "many"}})
        assert_error(invalid, "VALIDATION_ERROR")
        assert (await _step(ws, 2))["observation"]["count"] == 3


async def test_sessions_side_by_side_keep_their_own_state(
    on_loop_server: RunningServer,
) -> None:
    async def walk(amount: int) -> list[int]:
        async with ws_connect(on_loop_server.ws_url) as ws:
            await request(ws, {"type": "reset", "data": {}})
            return [(await _step(ws, amount))["observation"]["count"] for _ in range(20)]

    walks = await asyncio.gather(*(walk(amount) for amount in (1, 2, 3, 5)))
    for amount, counts in zip((1, 2, 3, 5), walks, strict=True):
        assert counts == [amount * (i + 1) for i in range(20)]
