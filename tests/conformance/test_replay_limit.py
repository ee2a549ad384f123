"""The replies a session keeps for re-sent requests are bounded in bytes, not only in count.

Issue 11: the replay cache kept the last 32 replies whatever their size (4 resumable sessions
with 4 MB replies took 469 MB). The server now keeps as many of the newest encoded replies as
fit in `OPENENV_REPLAY_BYTES` (the newest always); a re-sent request whose reply was dropped
gets `REPLY_EVICTED` and is not applied again. The tests read which replies were kept through
the protocol itself: a kept reply comes back byte for byte, a dropped one as `REPLY_EVICTED`,
and the step count shows that nothing was applied twice.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.support.server import RunningServer

from .conftest import REPLAY_BYTES
from .helpers import TIMEOUT, assert_error, recv, wait_capacity, ws_connect

RESUME_TOKEN_HEADER = "X-OpenEnv-Resume-Token"
#: Payload of each step's reply: a few of them fill the replay server's budget.
PAYLOAD = REPLAY_BYTES // 3 - 1024


def kept_ids(sizes: dict[str, int], limit: int) -> set[str]:
    """The documented rule: the newest replies whose sizes sum to at most `limit`, and always
    the newest one."""
    kept: set[str] = set()
    total = 0
    for rid in reversed(list(sizes)):
        total += sizes[rid]
        if kept and total > limit:
            break
        kept.add(rid)
    return kept


async def _step(ws: Any, rid: str, size: int) -> bytes:
    await ws.send(f'{{"type":"step","id":"{rid}","data":{{"size":{size}}}}}')
    raw = await ws.recv()
    return raw.encode() if isinstance(raw, str) else raw


async def test_replies_are_kept_up_to_the_byte_budget(replay_server: RunningServer) -> None:
    await wait_capacity(replay_server.url, active_sessions=0)
    ws = await ws_connect(f"{replay_server.ws_url}?resumable=1")
    session = (await recv(ws))["data"]
    await ws.send('{"type":"reset","id":"r0"}')
    await recv(ws)
    replies: dict[str, bytes] = {}
    for i in range(1, 9):
        replies[f"s{i}"] = await _step(ws, f"s{i}", PAYLOAD)
    ws.transport.abort()  # the connection drops, as when a client must resume

    sizes = {rid: len(raw) for rid, raw in replies.items()}
    kept = kept_ids(sizes, REPLAY_BYTES)
    assert 1 < len(kept) < len(replies)  # the budget, not the count window, decides

    async with ws_connect(
        f"{replay_server.ws_url}?session_id={session['session_id']}",
        additional_headers={RESUME_TOKEN_HEADER: session["resume_token"]},
    ) as again:
        resumed = await recv(again)
        assert resumed["data"]["resumed"] is True
        assert resumed["data"]["step_count"] == 8
        for rid, raw in replies.items():
            replay = await _step(again, rid, PAYLOAD)
            frame = json.loads(replay)
            if rid in kept:
                assert replay == raw, (rid, frame["type"])
            else:
                assert frame["type"] == "error", (rid, frame["type"])  # short, unlike the frame
                data = assert_error(frame, "REPLY_EVICTED", "infrastructure", has_id=rid)
                assert "not applied again" in data["message"]
        # Nothing was applied twice.
        await again.send('{"type":"state"}')
        assert (await recv(again))["data"]["step_count"] == 8

        # The newest reply is kept even when it alone is over the budget; it then displaces
        # every older one.
        big = await _step(again, "big", 2 * REPLAY_BYTES)
        assert len(big) > REPLAY_BYTES
        assert await _step(again, "big", 2 * REPLAY_BYTES) == big
        evicted = json.loads(await _step(again, "s8", PAYLOAD))
        assert_error(evicted, "REPLY_EVICTED", has_id="s8")
        await again.send('{"type":"state"}')
        assert (await recv(again))["data"]["step_count"] == 9
        await again.send('{"type":"close"}')
    await wait_capacity(replay_server.url, active_sessions=0)


async def test_http_request_ids_share_the_byte_budget(replay_server: RunningServer) -> None:
    await wait_capacity(replay_server.url, active_sessions=0)
    async with httpx.AsyncClient(base_url=replay_server.url, timeout=TIMEOUT) as http:
        opened = await http.post("/reset", headers={"X-OpenEnv-Session-Id": "new"})
        assert opened.status_code == 200, opened.text
        sid = opened.json()["session_id"]
        headers = {"X-OpenEnv-Session-Id": sid}

        async def step(rid: str) -> httpx.Response:
            body = {"action": {"size": PAYLOAD}, "request_id": rid}
            return await http.post("/step", json=body, headers=headers)

        first = {rid: (await step(rid)).content for rid in ("h1", "h2", "h3", "h4", "h5")}
        kept = kept_ids({rid: len(raw) for rid, raw in first.items()}, REPLAY_BYTES)
        assert "h1" not in kept and "h5" in kept
        again = await step("h5")
        assert again.status_code == 200 and again.content == first["h5"]
        lost = await step("h1")
        assert lost.status_code == 410, lost.text
        detail = lost.json()["detail"]
        assert detail["code"] == "REPLY_EVICTED"
        assert detail["category"] == "infrastructure"
        state = await http.get("/state", headers=headers)
        assert state.json()["step_count"] == 5
        closed = await http.delete(f"/sessions/{sid}")
        assert closed.status_code == 200
    await wait_capacity(replay_server.url, active_sessions=0)


async def test_a_kept_reply_answers_a_resend_on_another_transport(
    replay_server: RunningServer,
) -> None:
    """Replies are kept without their transport's envelope: a session opened over MCP and
    driven over /ws and HTTP answers a re-send on either from the same stored reply."""
    await wait_capacity(replay_server.url, active_sessions=0)
    async with httpx.AsyncClient(base_url=replay_server.url, timeout=TIMEOUT) as http:
        rpc = {"jsonrpc": "2.0", "method": "openenv/session/create", "id": 1}
        sid = (await http.post("/mcp", json=rpc)).json()["result"]["session_id"]
        headers = {"X-OpenEnv-Session-Id": sid}
        async with ws_connect(
            f"{replay_server.ws_url}?session_id={sid}", subprotocols=["openenv.v1"]
        ) as ws:
            assert (await recv(ws))["type"] == "session"
            frame = json.loads(await _step(ws, "w1", 10))
            over_http = await http.post(
                "/step", json={"action": {"size": 10}, "request_id": "w1"}, headers=headers
            )
            assert over_http.status_code == 200, over_http.text
            assert over_http.json() == {**frame["data"], "session_id": sid}

            first = await http.post(
                "/step", json={"action": {"size": 20}, "request_id": "h1"}, headers=headers
            )
            again = json.loads(await _step(ws, "h1", 20))
            assert again == {"type": "observation", "data": _without_sid(first.json()), "id": "h1"}
            state = await http.get("/state", headers=headers)
            assert state.json()["step_count"] == 2
        rpc = {"jsonrpc": "2.0", "method": "openenv/session/close", "id": 2}
        await http.post("/mcp", json={**rpc, "params": {"session_id": sid}})
    await wait_capacity(replay_server.url, active_sessions=0)


def _without_sid(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != "session_id"}
