"""Capacity: the wait queue, queue timeout, no-queue refusal, `/capacity`, and the idle reaper."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest
from websockets.exceptions import ConnectionClosed

from tests.support.server import RunningServer

from .conftest import SESSION_TIMEOUT_S, closed_episodes
from .helpers import (
    assert_error,
    assert_observation_frame,
    capacity,
    expect_closed,
    recv,
    request,
    send,
    wait_capacity,
    ws_connect,
)


async def served(server: RunningServer, **kwargs):
    conn = await ws_connect(server.ws_url, **kwargs)
    assert_observation_frame(await request(conn, {"type": "reset"}))
    return conn


# -- the queue --------------------------------------------------------------------------------


async def test_capacity_endpoint_counts(two_slot_server: RunningServer) -> None:
    await wait_capacity(two_slot_server.url, active_sessions=0)
    assert capacity(two_slot_server.url) == {"active_sessions": 0, "max_sessions": 2, "queued": 0}
    a = await served(two_slot_server)
    assert capacity(two_slot_server.url)["active_sessions"] == 1
    b = await served(two_slot_server)
    assert capacity(two_slot_server.url) == {"active_sessions": 2, "max_sessions": 2, "queued": 0}
    await a.close()
    await b.close()
    await wait_capacity(two_slot_server.url, active_sessions=0, queued=0)


async def test_third_connection_waits_until_a_slot_frees(two_slot_server: RunningServer) -> None:
    await wait_capacity(two_slot_server.url, active_sessions=0)
    a = await served(two_slot_server)
    b = await served(two_slot_server)
    async with ws_connect(two_slot_server.ws_url) as c:
        await send(c, {"type": "reset", "data": {"episode_id": "queued"}})
        with pytest.raises(asyncio.TimeoutError):
            await recv(c, timeout=0.6)
        await wait_capacity(two_slot_server.url, active_sessions=2, queued=1)

        closed_at = time.monotonic()
        await a.close()
        frame = await recv(c, timeout=5)
        answered_at = time.monotonic()
        assert answered_at >= closed_at
        assert_observation_frame(frame)
        state = (await request(c, {"type": "state"}))["data"]
        assert state["episode_id"] == "queued"
        assert capacity(two_slot_server.url) == {
            "active_sessions": 2,
            "max_sessions": 2,
            "queued": 0,
        }
    await b.close()
    await wait_capacity(two_slot_server.url, active_sessions=0, queued=0)


async def test_queue_is_first_in_first_out(two_slot_server: RunningServer) -> None:
    await wait_capacity(two_slot_server.url, active_sessions=0)
    a = await served(two_slot_server)
    b = await served(two_slot_server)
    c = await ws_connect(two_slot_server.ws_url)
    await send(c, {"type": "reset"})
    await wait_capacity(two_slot_server.url, queued=1)
    d = await ws_connect(two_slot_server.ws_url)
    await send(d, {"type": "reset"})
    await wait_capacity(two_slot_server.url, queued=2)

    await a.close()
    assert_observation_frame(await recv(c))
    with pytest.raises(asyncio.TimeoutError):
        await recv(d, timeout=0.3)
    await b.close()
    assert_observation_frame(await recv(d))
    for conn in (c, d):
        await conn.close()
    await wait_capacity(two_slot_server.url, active_sessions=0, queued=0)


async def test_abandoned_waiter_leaves_the_queue(two_slot_server: RunningServer) -> None:
    await wait_capacity(two_slot_server.url, active_sessions=0)
    a = await served(two_slot_server)
    b = await served(two_slot_server)
    c = await ws_connect(two_slot_server.ws_url)
    await wait_capacity(two_slot_server.url, queued=1)
    await c.close()
    try:
        await wait_capacity(two_slot_server.url, timeout=3, active_sessions=2, queued=0)
    finally:
        await a.close()
        await b.close()
        # Whatever happened to the abandoned waiter, the pool drains back to empty.
        await wait_capacity(two_slot_server.url, active_sessions=0, queued=0)


async def test_queue_timeout_sends_capacity_reached(short_queue_server: RunningServer) -> None:
    await wait_capacity(short_queue_server.url, active_sessions=0)
    holder = await served(short_queue_server)
    try:
        started = time.monotonic()
        async with ws_connect(short_queue_server.ws_url) as waiter:
            # Well before the 30 s default queue timeout, which an ignored setting would wait.
            frames = await expect_closed(waiter, timeout=15)
        waited = time.monotonic() - started
        assert len(frames) == 1, frames
        data = assert_error(frames[0], "CAPACITY_REACHED", "infrastructure")
        assert data["active_sessions"] == 1
        assert data["max_sessions"] == 1
        assert waited >= 0.4, waited  # it queued for OPENENV_QUEUE_TIMEOUT first
        # The holder is unaffected.
        assert_observation_frame(await request(holder, {"type": "step", "data": {"amount": 1}}))
    finally:
        await holder.close()
    await wait_capacity(short_queue_server.url, active_sessions=0, queued=0)


async def test_no_queue_refuses_immediately(no_queue_server: RunningServer) -> None:
    await wait_capacity(no_queue_server.url, active_sessions=0)
    holder = await served(no_queue_server)
    try:
        async with ws_connect(no_queue_server.ws_url) as refused:
            # Well before the 30 s default queue timeout, which a queued connection would wait.
            frames = await expect_closed(refused, timeout=15)
        assert len(frames) == 1, frames
        data = assert_error(frames[0], "CAPACITY_REACHED", "infrastructure")
        assert data["message"].startswith("Server at capacity: 1/1 sessions active")
        assert (data["active_sessions"], data["max_sessions"]) == (1, 1)
        assert capacity(no_queue_server.url) == {
            "active_sessions": 1,
            "max_sessions": 1,
            "queued": 0,
        }
    finally:
        await holder.close()
    await wait_capacity(no_queue_server.url, active_sessions=0)
    # Refusals did not leak a slot.
    (await served(no_queue_server)).transport.abort()
    await wait_capacity(no_queue_server.url, active_sessions=0)


async def test_http_session_counts_against_capacity(no_queue_server: RunningServer) -> None:
    await wait_capacity(no_queue_server.url, active_sessions=0)
    holder = await served(no_queue_server)
    try:
        async with httpx.AsyncClient(base_url=no_queue_server.url) as http:
            response = await http.post("/reset", headers={"X-OpenEnv-Session-Id": "new"})
            assert response.status_code == 503
            assert response.headers["retry-after"]
            detail = response.json()["detail"]
            assert detail["code"] == "CAPACITY_REACHED"
            assert detail["category"] == "infrastructure"
            # A stateless call's throwaway environment needs a slot too (issue 11).
            stateless = await http.post("/step", json={"action": {"amount": 1}})
            assert stateless.status_code == 503, stateless.text
            assert stateless.json()["detail"]["code"] == "CAPACITY_REACHED"
    finally:
        await holder.close()
    await wait_capacity(no_queue_server.url, active_sessions=0)
    async with httpx.AsyncClient(base_url=no_queue_server.url) as http:
        assert (await http.post("/reset")).status_code == 200
    await wait_capacity(no_queue_server.url, active_sessions=0)


# -- the idle reaper --------------------------------------------------------------------------


async def test_idle_websocket_is_closed_with_4001(
    reaper_server: RunningServer, reaper_marker: Path
) -> None:
    await wait_capacity(reaper_server.url, active_sessions=0)
    conn = await ws_connect(reaper_server.ws_url)
    await request(conn, {"type": "reset", "data": {"episode_id": "idle-ep"}})
    started = time.monotonic()
    with pytest.raises(ConnectionClosed):
        await asyncio.wait_for(conn.recv(), SESSION_TIMEOUT_S + 30)
    idle_for = time.monotonic() - started
    assert conn.close_code == 4001
    assert conn.close_reason
    assert idle_for >= SESSION_TIMEOUT_S * 0.9  # not before its idle timeout

    # The slot is freed exactly once and the env closed exactly once.
    await wait_capacity(reaper_server.url, active_sessions=0, queued=0)
    assert closed_episodes(reaper_marker).count("idle-ep") == 1

    # One slot: a fresh connection is served, and a second one has to wait.
    fresh = await served(reaper_server)
    try:
        async with ws_connect(reaper_server.ws_url) as extra:
            await send(extra, {"type": "reset"})
            with pytest.raises(asyncio.TimeoutError):
                await recv(extra, timeout=0.5)
            assert capacity(reaper_server.url) == {
                "active_sessions": 1,
                "max_sessions": 1,
                "queued": 1,
            }
            await fresh.close()
            assert_observation_frame(await recv(extra))
    finally:
        await fresh.close()
    await wait_capacity(reaper_server.url, active_sessions=0, queued=0)


async def test_active_websocket_is_not_reaped(reaper_server: RunningServer) -> None:
    await wait_capacity(reaper_server.url, active_sessions=0)
    async with ws_connect(reaper_server.ws_url) as conn:
        await request(conn, {"type": "reset"})
        deadline = time.monotonic() + SESSION_TIMEOUT_S * 2.5
        steps = 0
        while time.monotonic() < deadline:
            assert_observation_frame(await request(conn, {"type": "step", "data": {"amount": 1}}))
            steps += 1
            await asyncio.sleep(SESSION_TIMEOUT_S / 4)
        assert (await request(conn, {"type": "state"}))["data"]["step_count"] == steps


async def test_idle_http_session_is_reaped(reaper_server: RunningServer) -> None:
    await wait_capacity(reaper_server.url, active_sessions=0)
    async with httpx.AsyncClient(base_url=reaper_server.url) as http:
        sid = (await http.post("/reset", headers={"X-OpenEnv-Session-Id": "new"})).json()[
            "session_id"
        ]
        assert capacity(reaper_server.url)["active_sessions"] == 1
        await wait_capacity(reaper_server.url, timeout=SESSION_TIMEOUT_S + 30, active_sessions=0)
        response = await http.get("/state", headers={"X-OpenEnv-Session-Id": sid})
        assert response.status_code == 404
        assert response.json()["detail"]["code"] == "SESSION_NOT_FOUND"
