"""Resumable `/ws` sessions: session frame, reattach after a dropped connection, replay by id."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed

from openenv.core.protocol import decode_reply
from tests.support.server import RunningServer

from .conftest import RESUME_GRACE_S, closed_episodes
from .helpers import (
    TIMEOUT,
    assert_error,
    assert_observation_frame,
    expect_closed,
    poll,
    recv,
    request,
    send,
    ws_connect,
)

SUBPROTOCOL = "openenv.v1"
#: Spelled out, not imported: the wire name is what clients of any implementation send.
RESUME_TOKEN_HEADER = "X-OpenEnv-Resume-Token"


def drop(ws) -> None:
    """Lose the TCP connection without a closing handshake."""
    ws.transport.abort()


async def open_resumable(server: RunningServer, **kwargs):
    conn = await ws_connect(f"{server.ws_url}?resumable=1", **kwargs)
    frame = await recv(conn)
    assert frame["type"] == "session", frame
    assert "id" not in frame
    return conn, frame["data"]


async def test_resumable_connection_announces_session(counter_server: RunningServer) -> None:
    conn, data = await open_resumable(counter_server)
    try:
        assert isinstance(data["session_id"], str) and data["session_id"]
        assert data["resumed"] is False
        assert data["step_count"] == 0
        assert data["resume_grace_s"] == RESUME_GRACE_S
        assert_observation_frame(await request(conn, {"type": "reset"}))
    finally:
        await conn.close()


async def test_subprotocol_announces_session(counter_server: RunningServer) -> None:
    async with ws_connect(counter_server.ws_url, subprotocols=[SUBPROTOCOL]) as conn:
        assert conn.subprotocol == SUBPROTOCOL
        frame = await recv(conn)
        assert frame["type"] == "session"
        assert frame["data"]["resumed"] is False


async def test_plain_connection_has_no_session_frame(counter_server: RunningServer) -> None:
    async with ws_connect(counter_server.ws_url) as conn:
        assert conn.subprotocol is None
        assert_observation_frame(await request(conn, {"type": "reset"}))


async def test_resume_after_abrupt_drop_continues_episode(counter_server: RunningServer) -> None:
    conn, data = await open_resumable(counter_server)
    sid = data["session_id"]
    await request(conn, {"type": "reset", "id": "r0", "data": {"episode_id": "resume-ep"}})
    replies = {}
    for i, amount in enumerate((1, 2, 3), start=1):
        replies[f"s{i}"] = await request(
            conn, {"type": "step", "id": f"s{i}", "data": {"amount": amount}}
        )
        assert replies[f"s{i}"]["id"] == f"s{i}"
    drop(conn)

    async with resume_connect(counter_server, data) as again:
        frame = await recv(again)
        assert frame["type"] == "session", frame
        assert frame["data"]["session_id"] == sid
        assert frame["data"]["resumed"] is True
        assert frame["data"]["step_count"] == 3

        state = (await request(again, {"type": "state"}))["data"]
        assert state["episode_id"] == "resume-ep"
        assert state["step_count"] == 3
        assert state["history"] == [1, 2, 3]

        # Re-sending an answered id returns the stored reply and applies nothing.
        replay = await request(again, {"type": "step", "id": "s3", "data": {"amount": 3}})
        assert replay == replies["s3"]
        replay = await request(again, {"type": "step", "id": "s1", "data": {"amount": 1}})
        assert replay == replies["s1"]
        state = (await request(again, {"type": "state"}))["data"]
        assert state["step_count"] == 3
        assert state["history"] == [1, 2, 3]

        # A new id is a new step.
        new = await request(again, {"type": "step", "id": "s4", "data": {"amount": 4}})
        assert new["id"] == "s4"
        assert new["data"]["observation"]["history_length"] == 4
        assert (await request(again, {"type": "state"}))["data"]["step_count"] == 4
        await again.send('{"type": "close"}')


async def test_reply_lost_with_connection_is_applied_exactly_once(
    counter_server: RunningServer,
) -> None:
    conn, data = await open_resumable(counter_server)
    await request(conn, {"type": "reset", "id": "r0"})
    await conn.send('{"type": "step", "id": "lost", "data": {"amount": 5}}')
    await asyncio.sleep(0.2)  # the server applies it; its reply dies with the connection
    drop(conn)

    async with resume_connect(counter_server, data) as again:
        assert (await recv(again))["data"]["resumed"] is True
        reply = await request(again, {"type": "step", "id": "lost", "data": {"amount": 5}})
        assert reply["id"] == "lost"
        assert reply["data"]["observation"]["count"] == 5
        assert reply["data"]["observation"]["history_length"] == 1
        state = (await request(again, {"type": "state"}))["data"]
        assert state["step_count"] == 1
        assert state["history"] == [5]
        await again.send('{"type": "close"}')


async def test_resend_while_original_is_in_flight(slow_server: RunningServer) -> None:
    """The client drops while its step runs and re-sends it: one step, one shared reply."""
    conn, data = await open_resumable(slow_server)
    await conn.send('{"type": "step", "id": "x", "data": {"tag": "x", "delay_ms": 500}}')
    await asyncio.sleep(0.1)
    drop(conn)
    async with resume_connect(slow_server, data) as again:
        assert (await recv(again))["data"]["resumed"] is True
        reply = await request(again, {"type": "step", "id": "x", "data": {"tag": "x"}})
        assert reply["id"] == "x"
        assert reply["data"]["observation"]["tag"] == "x"
        state = (await request(again, {"type": "state"}))["data"]
        assert state["tags"] == ["x"]
        assert state["step_count"] == 1
        await again.send('{"type": "close"}')


async def test_resume_with_subprotocol(counter_server: RunningServer) -> None:
    async with ws_connect(counter_server.ws_url, subprotocols=[SUBPROTOCOL]) as conn:
        data = (await recv(conn))["data"]
        sid = data["session_id"]
        await request(conn, {"type": "step", "id": 1, "data": {"amount": 2}})
        drop(conn)
    async with resume_connect(counter_server, data, subprotocols=[SUBPROTOCOL]) as again:
        frame = await recv(again)
        assert frame["data"] == {**frame["data"], "session_id": sid, "resumed": True}
        assert (await request(again, {"type": "state"}))["data"]["step_count"] == 1


async def test_attach_takes_over_a_live_connection(counter_server: RunningServer) -> None:
    first, data = await open_resumable(counter_server)
    await request(first, {"type": "step", "data": {"amount": 1}})
    async with resume_connect(counter_server, data) as second:
        assert (await recv(second))["data"]["resumed"] is True
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(first.recv(), 5)
        assert first.close_code == 4002
        assert (await request(second, {"type": "state"}))["data"]["step_count"] == 1


async def test_resumable_zero_means_plain(counter_server: RunningServer) -> None:
    async with ws_connect(f"{counter_server.ws_url}?resumable=0") as conn:
        assert_observation_frame(await request(conn, {"type": "reset"}))


async def test_closed_resumable_session_cannot_be_attached(counter_server: RunningServer) -> None:
    conn, data = await open_resumable(counter_server)
    await request(conn, {"type": "reset"})
    await conn.send('{"type": "close"}')
    assert await expect_closed(conn) == []
    async with resume_connect(counter_server, data) as again:
        frames = await expect_closed(again)
    assert len(frames) == 1, frames
    assert_error(frames[0], "SESSION_ERROR", "infrastructure")


async def test_unknown_session_id_is_session_error(counter_server: RunningServer) -> None:
    async with ws_connect(f"{counter_server.ws_url}?session_id=does-not-exist") as conn:
        frames = await expect_closed(conn)
    assert len(frames) == 1, frames
    data = assert_error(frames[0], "SESSION_ERROR", "infrastructure")
    assert "does-not-exist" in data["message"]


async def test_session_is_gone_after_grace(
    counter_server: RunningServer, close_marker: Path
) -> None:
    conn, data = await open_resumable(counter_server)
    await request(conn, {"type": "reset", "data": {"episode_id": "grace-ep"}})
    await request(conn, {"type": "step", "data": {"amount": 1}})
    drop(conn)

    # The env is closed once the grace period is over...
    await poll(lambda: "grace-ep" in closed_episodes(close_marker), timeout=RESUME_GRACE_S + 4)
    # ...and the session can no longer be attached.
    async with resume_connect(counter_server, data) as again:
        frames = await expect_closed(again)
    assert len(frames) == 1, frames
    assert_error(frames[0], "SESSION_ERROR", "infrastructure")
    assert closed_episodes(close_marker).count("grace-ep") == 1


async def test_session_survives_within_grace(counter_server: RunningServer) -> None:
    conn, data = await open_resumable(counter_server)
    await request(conn, {"type": "step", "data": {"amount": 7}})
    drop(conn)
    await asyncio.sleep(RESUME_GRACE_S * 0.5)
    async with resume_connect(counter_server, data) as again:
        assert (await recv(again))["data"]["resumed"] is True
        assert (await request(again, {"type": "state"}))["data"]["count"] == 7


def resume_connect(server: RunningServer, data: dict[str, Any], **kwargs: Any) -> Any:
    """Reconnect to a session as its client does: its id and the token it was announced with."""
    return ws_connect(
        f"{server.ws_url}?session_id={data['session_id']}",
        additional_headers={RESUME_TOKEN_HEADER: data["resume_token"]},
        **kwargs,
    )


@pytest.mark.parametrize("token", [None, "wrong-token"])
async def test_resume_needs_the_token_and_a_refusal_harms_nothing(
    counter_server: RunningServer, token: str | None
) -> None:
    conn, data = await open_resumable(counter_server)
    await request(conn, {"type": "step", "data": {"amount": 3}})
    headers = {RESUME_TOKEN_HEADER: token} if token else {}
    async with ws_connect(
        f"{counter_server.ws_url}?session_id={data['session_id']}", additional_headers=headers
    ) as intruder:
        frames = await expect_closed(intruder)
    assert_error(frames[0], "SESSION_ERROR", "infrastructure")
    # The owner's connection was not taken over and its episode goes on.
    assert (await request(conn, {"type": "state"}))["data"]["count"] == 3
    drop(conn)
    async with resume_connect(counter_server, data) as again:
        assert (await recv(again))["data"]["resumed"] is True


async def test_http_routes_cannot_act_on_a_websocket_session(
    counter_server: RunningServer,
) -> None:
    conn, data = await open_resumable(counter_server)
    await request(conn, {"type": "step", "data": {"amount": 2}})
    sid = data["session_id"]
    async with httpx.AsyncClient(base_url=counter_server.url, trust_env=False) as http:
        step = await http.post(
            "/step", json={"action": {"amount": 5}}, headers={"X-OpenEnv-Session-Id": sid}
        )
        state = await http.get("/state", params={"session_id": sid})
        delete = await http.delete(f"/sessions/{sid}")
    for reply in (step, state, delete):
        assert reply.status_code == 404, reply.text
    assert (await request(conn, {"type": "state"}))["data"]["history"] == [2]


BINARY_SUBPROTOCOL = "openenv.v1.bin"
FRAME = bytes(range(16))  # what the frames env's step of size 16 puts in its observation


async def test_a_reply_stored_as_a_binary_frame_is_json_for_a_json_only_resume(
    frames_server: RunningServer,
) -> None:
    """The stored reply follows the connection that re-sends: a client that no longer offers
    `openenv.v1.bin` could not read a binary frame."""
    async with ws_connect(
        frames_server.ws_url, subprotocols=[BINARY_SUBPROTOCOL, SUBPROTOCOL]
    ) as conn:
        assert conn.subprotocol == BINARY_SUBPROTOCOL
        data = (await recv(conn))["data"]
        await send(conn, {"type": "step", "id": "f1", "data": {"size": len(FRAME)}})
        raw = await asyncio.wait_for(conn.recv(), TIMEOUT)
        assert isinstance(raw, bytes) and raw.startswith(b"\x00OEB")  # attached, not text
        assert decode_reply(raw).data["observation"]["frame"] == FRAME
        drop(conn)
    async with resume_connect(frames_server, data, subprotocols=[SUBPROTOCOL]) as again:
        assert again.subprotocol == SUBPROTOCOL
        assert (await recv(again))["data"]["resumed"] is True
        await send(again, {"type": "step", "id": "f1", "data": {"size": len(FRAME)}})
        text = await asyncio.wait_for(again.recv(), TIMEOUT)
        assert isinstance(text, str), text  # a text frame: JSON, the bytes as base64
        reply = json.loads(text)
        assert reply["id"] == "f1"
        assert reply["data"]["observation"]["frame"] == base64.b64encode(FRAME).decode()
        assert (await request(again, {"type": "state"}))["data"]["step_count"] == 1
        await again.send('{"type": "close"}')


async def test_a_reply_stored_as_json_stays_json_for_a_binary_resume(
    frames_server: RunningServer,
) -> None:
    """The other way round JSON is kept: a binary client reads text frames too (the bytes as
    base64, which `WireBytes` reads), and its new replies come binary."""
    conn, data = await open_resumable(frames_server)
    await send(conn, {"type": "step", "id": "j1", "data": {"size": len(FRAME)}})
    first = await asyncio.wait_for(conn.recv(), TIMEOUT)
    assert isinstance(first, str)
    drop(conn)
    async with resume_connect(
        frames_server, data, subprotocols=[BINARY_SUBPROTOCOL, SUBPROTOCOL]
    ) as again:
        assert (await recv(again))["data"]["resumed"] is True
        await send(again, {"type": "step", "id": "j1", "data": {"size": len(FRAME)}})
        assert await asyncio.wait_for(again.recv(), TIMEOUT) == first
        await send(again, {"type": "step", "id": "j2", "data": {"size": len(FRAME)}})
        raw = await asyncio.wait_for(again.recv(), TIMEOUT)
        assert isinstance(raw, bytes) and decode_reply(raw).data["observation"]["frame"] == FRAME
        assert (await request(again, {"type": "state"}))["data"]["step_count"] == 2
        await again.send('{"type": "close"}')
