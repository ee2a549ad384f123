"""Many sessions at once: isolation, a non-blocked event loop, and per-session ordering."""

from __future__ import annotations

import asyncio
import itertools
from uuid import uuid4

import httpx

from tests.support.server import RunningServer

from .helpers import TIMEOUT, assert_observation_frame, recv, request, send, ws_connect


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
    gate = new_name("gate")
    async with (
        ws_connect(slow_server.ws_url) as a,
        ws_connect(slow_server.ws_url) as b,
        httpx.AsyncClient(base_url=slow_server.url, timeout=TIMEOUT) as http,
    ):
        await request(a, {"type": "reset"})
        await request(b, {"type": "reset"})
        # a's step blocks its thread until the gate opens; everything below is answered meanwhile
        # (a step run on the event loop would leave them all unanswered).
        await send(a, {"type": "step", "data": {"tag": "slow", "hold": gate, "delay_ms": 0}})
        quick = await request(
            b, {"type": "step", "data": {"tag": "quick", "delay_ms": 0, "after_held": gate}}
        )
        assert quick["data"]["observation"]["tag"] == "quick"
        assert (await http.get("/health")).status_code == 200
        assert (await request(b, {"type": "state"}))["data"]["tags"] == ["quick"]

        await open_gate(http, gate)
        slow = await recv(a)
        assert slow["data"]["observation"]["tag"] == "slow"
        assert (await request(a, {"type": "state"}))["data"]["tags"] == ["slow"]


async def test_slow_steps_of_different_sessions_overlap(slow_server: RunningServer) -> None:
    meeting = new_name("meeting")  # each step waits there until all four are in their steps

    async def one(tag: str) -> None:
        async with ws_connect(slow_server.ws_url) as conn:
            data = {"tag": tag, "delay_ms": 0, "meet": meeting, "parties": 4}
            frame = await request(conn, {"type": "step", "data": data})
            assert_observation_frame(frame)
            assert frame["data"]["observation"]["tag"] == tag

    await asyncio.gather(*(one(f"t{i}") for i in range(4)))


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
    gate = new_name("gate")
    async with (
        ws_connect(slow_server.ws_url) as conn,
        httpx.AsyncClient(base_url=slow_server.url, timeout=TIMEOUT) as http,
    ):
        await send(conn, {"type": "step", "data": {"tag": "slow", "hold": gate, "delay_ms": 0}})
        # Answered while the WebSocket step blocks its thread; then it opens the gate.
        action = {"tag": "http", "delay_ms": 0, "after_held": gate, "open_gate": gate}
        response = await http.post("/step", json={"action": action})
        assert response.status_code == 200
        assert response.json()["observation"]["tag"] == "http"
        assert (await recv(conn))["data"]["observation"]["tag"] == "slow"


async def test_blocked_sessions_do_not_starve_a_quick_one(slow_server: RunningServer) -> None:
    """Sync envs that block (a slow judge, a subprocess) must not delay other sessions.

    OpenEnv gives each session its own executor thread; here 70 sessions block at once, more
    than any fixed-size shared pool would hold: the quick step meets all 70 while they block.
    """
    blocked = 70
    meeting, gate = new_name("meeting"), new_name("gate")
    conns = await asyncio.gather(*(ws_connect(slow_server.ws_url) for _ in range(blocked)))
    try:
        async with (
            ws_connect(slow_server.ws_url) as quick,
            httpx.AsyncClient(base_url=slow_server.url, timeout=TIMEOUT) as http,
        ):
            await request(quick, {"type": "reset"})
            meet = {"meet": meeting, "parties": blocked + 1, "delay_ms": 0}
            for conn in conns:
                await send(conn, {"type": "step", "data": {"tag": "blocked", "hold": gate, **meet}})
            reply = await request(quick, {"type": "step", "data": {"tag": "quick", **meet}})
            assert reply["data"]["observation"]["tag"] == "quick"
            await open_gate(http, gate)
            for conn in conns:
                assert (await recv(conn))["data"]["observation"]["tag"] == "blocked"
    finally:
        await asyncio.gather(*(conn.close() for conn in conns), return_exceptions=True)


def new_name(kind: str) -> str:
    """A meeting or gate name of the slow app no other test uses."""
    return f"{kind}-{uuid4()}"


async def open_gate(http: httpx.AsyncClient, gate: str) -> None:
    """Open `gate` with a stateless HTTP step (steps holding it go on)."""
    action = {"tag": "opener", "delay_ms": 0, "open_gate": gate}
    assert (await http.post("/step", json={"action": action})).status_code == 200
