"""A `close` with an id is acknowledged with `closed` before the socket closes (found by the soak).

The session was destroyed first, which closed the socket, so the acknowledgement was never sent.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.conformance.helpers import expect_closed, recv, request, send, ws_connect
from tests.support.server import serve


@pytest.mark.parametrize("resumable", [False, True])
def test_close_with_an_id_is_acknowledged_then_the_session_ends(resumable: bool) -> None:
    with serve("tests.apps.counter:app") as server:

        async def play() -> None:
            url = server.ws_url + ("?resumable=1" if resumable else "")
            async with ws_connect(url) as ws:
                if resumable:
                    assert (await recv(ws))["type"] == "session"
                reply = await request(ws, {"type": "reset", "id": 1, "data": {}})
                assert reply["type"] == "observation"
                await send(ws, {"type": "close", "id": "bye"})
                assert await expect_closed(ws) == [{"type": "closed", "data": {}, "id": "bye"}]

        asyncio.run(play())
        capacity = httpx.get(f"{server.url}/capacity", timeout=30).json()
        assert capacity["active_sessions"] == 0
