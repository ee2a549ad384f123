"""Many sessions at once: isolation, a non-blocked event loop, and per-session ordering."""

from __future__ import annotations

import asyncio
import itertools
import time

import httpx

from tests.support.server import RunningServer

from .conftest import SLOW_MS
from .helpers import assert_observation_frame, recv, request, send, ws_connect


async def test_twenty_sessions_do_not_mix(counter_server: RunningServer) -> None:
    sessions = 20
    steps = 5

    async def run(i: int) -> dict:
        async with ws_connect(counter_server.ws_url) as conn:
            reset = await request(
                conn, {"type": "reset", "data": {"seed": i, "episode_id": f"c{i}"}}
            )
            start = reset["data"]["observation"]["count"]
            for _ in range(steps):
                frame = await request(conn, {"type": "step", "data": {"amount": 100 + i}})
                assert_observation_frame(frame)
                await asyncio.sleep(0)
            state = (await request(conn, {"type": "state"}))["data"]
            return {"start": start, "state": state, "last": frame["data"]["observation"]}

    results = await asyncio.gather(*(run(i) for i in range(sessions)))
    for i, result in enumerate(results):
        state = result["state"]
        assert state["episode_id"] == f"c{i}"
        assert state["seed"] == i
        assert state["step_count"] == steps
        assert state["history"] == [100 + i] * steps
        assert state["count"] == result["start"] + steps * (100 + i)
        assert result["last"]["count"] == state["count"]


async def test_sync_step_does_not_block_the_event_loop(slow_server: RunningServer) -> None:
    async with (
        ws_connect(slow_server.ws_url) as a,
        ws_connect(slow_server.ws_url) as b,
        httpx.AsyncClient(base_url=slow_server.url) as http,
    ):
        await request(a, {"type": "reset"})
        await request(b, {"type": "reset"})
        await http.get("/health")  # warm the connection

        started = time.monotonic()
        await send(a, {"type": "step", "data": {"tag": "slow"}})
        await asyncio.sleep(0.05)

        t0 = time.monotonic()
        assert (await http.get("/health")).status_code == 200
        health_s = time.monotonic() - t0

        t0 = time.monotonic()
        quick = await request(b, {"type": "step", "data": {"tag": "quick", "delay_ms": 0}})
        quick_s = time.monotonic() - t0
        assert quick["data"]["observation"]["tag"] == "quick"

        t0 = time.monotonic()
        assert (await request(b, {"type": "state"}))["data"]["tags"] == ["quick"]
        state_s = time.monotonic() - t0

        slow = await recv(a)
        slow_s = time.monotonic() - started
        assert slow["data"]["observation"]["tag"] == "slow"
        assert slow_s >= SLOW_MS / 1000
        # All of these were answered while the slow step was still sleeping.
        for took in (health_s, quick_s, state_s):
            assert took < 0.15, (health_s, quick_s, state_s)
        assert 0.05 + health_s + quick_s + state_s < SLOW_MS / 1000


async def test_slow_steps_of_different_sessions_overlap(slow_server: RunningServer) -> None:
    async def one(tag: str) -> float:
        async with ws_connect(slow_server.ws_url) as conn:
            frame = await request(conn, {"type": "step", "data": {"tag": tag}})
            assert_observation_frame(frame)
            return frame["data"]["observation"]["finished_at"]

    started = time.monotonic()
    await asyncio.gather(*(one(f"t{i}") for i in range(4)))
    elapsed = time.monotonic() - started
    assert elapsed < 2 * SLOW_MS / 1000, elapsed


async def test_pipelined_requests_run_in_order_within_a_session(
    slow_server: RunningServer,
) -> None:
    tags = ["a", "b", "c", "d", "e"]
    delays = [120, 90, 60, 30, 0]  # later steps are faster: overlap would reorder them
    async with ws_connect(slow_server.ws_url) as conn:
        for i, (tag, delay) in enumerate(zip(tags, delays, strict=True)):
            await send(conn, {"type": "step", "id": i, "data": {"tag": tag, "delay_ms": delay}})
        frames = [await recv(conn) for _ in tags]
        assert [f["id"] for f in frames] == list(range(len(tags)))
        observed = [f["data"]["observation"] for f in frames]
        assert [o["tag"] for o in observed] == tags
        for before, after in itertools.pairwise(observed):
            assert after["started_at"] >= before["finished_at"]
        assert (await request(conn, {"type": "state"}))["data"]["tags"] == tags


async def test_stateless_http_is_served_during_a_slow_step(slow_server: RunningServer) -> None:
    async with (
        ws_connect(slow_server.ws_url) as conn,
        httpx.AsyncClient(base_url=slow_server.url) as http,
    ):
        await send(conn, {"type": "step", "data": {"tag": "slow"}})
        await asyncio.sleep(0.05)
        t0 = time.monotonic()
        response = await http.post("/step", json={"action": {"tag": "http", "delay_ms": 0}})
        assert response.status_code == 200
        assert time.monotonic() - t0 < 0.2
        assert (await recv(conn))["data"]["observation"]["tag"] == "slow"


async def test_blocked_sessions_do_not_starve_a_quick_one(slow_server: RunningServer) -> None:
    """Sync envs that block (a slow judge, a subprocess) must not delay other sessions.

    OpenEnv gives each session its own executor thread; here 70 sessions block at once, more
    than any fixed-size shared pool would hold.
    """
    blocked = 70
    conns = await asyncio.gather(*(ws_connect(slow_server.ws_url) for _ in range(blocked)))
    try:
        async with ws_connect(slow_server.ws_url) as quick:
            await request(quick, {"type": "reset"})
            for conn in conns:
                await send(conn, {"type": "step", "data": {"tag": "blocked"}})
            await asyncio.sleep(0.05)
            t0 = time.monotonic()
            reply = await request(quick, {"type": "step", "data": {"tag": "quick", "delay_ms": 0}})
            took = time.monotonic() - t0
            assert reply["data"]["observation"]["tag"] == "quick"
            assert took < SLOW_MS / 1000, took
    finally:
        await asyncio.gather(*(recv(conn, timeout=30) for conn in conns), return_exceptions=True)
        await asyncio.gather(*(conn.close() for conn in conns), return_exceptions=True)
