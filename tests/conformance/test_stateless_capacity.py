"""Stateless calls (no session id: a throwaway environment per call) take a slot like sessions.

Issue 11: an environment declared not concurrency-safe had 31 live instances during 40 parallel
stateless calls. The test environment counts its own live instances (construction to close), so
these tests count instances, not time.
"""

from __future__ import annotations

import asyncio

import httpx

from tests.conformance.helpers import TIMEOUT, request, wait_capacity, ws_connect
from tests.support.server import RunningServer

PARALLEL = 40


async def _peak(http: httpx.AsyncClient) -> int:
    response = await http.get("/state")
    assert response.status_code == 200, response.text
    return response.json()["peak"]


async def test_parallel_stateless_calls_never_exceed_one_instance(
    limits_server: RunningServer,
) -> None:
    await wait_capacity(limits_server.url, active_sessions=0)
    async with httpx.AsyncClient(base_url=limits_server.url, timeout=4 * TIMEOUT) as http:

        async def call(i: int) -> httpx.Response:
            kind = i % 5
            if kind == 0:
                return await http.post("/reset", json={"seed": i})
            if kind == 1:
                return await http.get("/state")
            if kind == 2:
                rpc = {"jsonrpc": "2.0", "method": "tools/list", "id": i}
                return await http.post("/mcp", json=rpc)
            # A step that stays busy a little, so that calls running at once would overlap.
            return await http.post("/step", json={"action": {"size": 10, "hold_ms": 20}})

        replies = await asyncio.gather(*(call(i) for i in range(PARALLEL)))
        for reply in replies:
            assert reply.status_code == 200, reply.text
        steps = [r.json() for i, r in enumerate(replies) if i % 5 >= 3]
        # Every step saw itself as the only instance alive, and none ever saw more.
        assert {s["observation"]["live"] for s in steps} == {1}
        assert max(s["observation"]["peak"] for s in steps) == 1
        assert await _peak(http) == 1
    await wait_capacity(limits_server.url, active_sessions=0, queued=0)


async def test_stateless_call_waits_for_the_slot_a_session_holds(
    limits_server: RunningServer,
) -> None:
    """A stateless call queues behind a session (as a new session would) and runs once the
    session ends, on the only instance then alive."""
    await wait_capacity(limits_server.url, active_sessions=0)
    async with (
        ws_connect(limits_server.ws_url) as ws,
        httpx.AsyncClient(base_url=limits_server.url, timeout=4 * TIMEOUT) as http,
    ):
        frame = await request(ws, {"type": "reset", "data": {}})
        assert frame["type"] == "observation", frame
        stateless = asyncio.ensure_future(http.post("/step", json={"action": {"size": 1}}))
        await wait_capacity(limits_server.url, active_sessions=1, queued=1)
        assert not stateless.done()
        await ws.close()
        reply = await asyncio.wait_for(stateless, 4 * TIMEOUT)
        assert reply.status_code == 200, reply.text
        assert reply.json()["observation"]["live"] == 1
        assert await _peak(http) == 1
    await wait_capacity(limits_server.url, active_sessions=0, queued=0)


async def test_metadata_needs_no_second_instance(limits_server: RunningServer) -> None:
    """/metadata read while a session holds the only slot neither waits nor builds another
    instance (it is read from a live environment, once)."""
    await wait_capacity(limits_server.url, active_sessions=0)
    async with (
        ws_connect(limits_server.ws_url) as ws,
        httpx.AsyncClient(base_url=limits_server.url, timeout=TIMEOUT) as http,
    ):
        await request(ws, {"type": "reset", "data": {}})
        response = await http.get("/metadata")
        assert response.status_code == 200, response.text
        assert response.json()["name"]
        state = await request(ws, {"type": "state"})
        assert state["data"]["peak"] == 1
