"""`/ws` frames (reference 2.6): replies, errors, request ids, size limit, malformed input."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
from websockets.exceptions import ConnectionClosed, ConnectionClosedOK

from tests.support.server import RunningServer

from .conftest import MAX_MESSAGE_BYTES, closed_episodes
from .helpers import (
    assert_error,
    assert_observation_frame,
    capacity,
    poll,
    recv,
    request,
    send,
    wait_capacity,
    ws_connect,
)


@pytest.fixture
async def ws(counter_server: RunningServer):
    async with ws_connect(counter_server.ws_url) as conn:
        yield conn


async def test_reset_reply_shape(ws) -> None:
    frame = await request(ws, {"type": "reset", "data": {"seed": 11, "episode_id": "ep-ws"}})
    data = assert_observation_frame(frame)
    start = data["metadata"]["start"]
    assert data["observation"] == {
        "count": start,
        "history_length": 0,
        "metadata": {"start": start},
    }
    assert data["reward"] == 0 and type(data["reward"]) is int
    assert data["done"] is False


async def test_reset_without_data(ws) -> None:
    data = assert_observation_frame(await request(ws, {"type": "reset"}))
    assert data["observation"] == {"count": 0, "history_length": 0, "metadata": {"start": 0}}


async def test_reset_is_deterministic_over_ws(ws) -> None:
    first = await request(ws, {"type": "reset", "data": {"seed": 99}})
    await request(ws, {"type": "step", "data": {"amount": 5}})
    second = await request(ws, {"type": "reset", "data": {"seed": 99}})
    assert first == second


async def test_step_reply_shape(ws) -> None:
    await request(ws, {"type": "reset"})
    data = assert_observation_frame(await request(ws, {"type": "step", "data": {"amount": 3}}))
    assert data["observation"] == {"count": 3, "history_length": 1, "metadata": {"step": 1}}
    assert data["reward"] is False
    assert data["metadata"] == {"step": 1}
    data = assert_observation_frame(await request(ws, {"type": "step", "data": {"amount": 1}}))
    assert data["observation"] == {"count": 4, "history_length": 2, "metadata": {"step": 2}}
    assert data["reward"] is True


async def test_step_without_reset(ws) -> None:
    data = assert_observation_frame(await request(ws, {"type": "step", "data": {"amount": 2}}))
    assert data["observation"]["count"] == 2


async def test_state_reply_has_subclass_fields(ws) -> None:
    await request(ws, {"type": "reset", "data": {"seed": 5, "episode_id": "ep-state"}})
    await request(ws, {"type": "step", "data": {"amount": 2}})
    await request(ws, {"type": "step", "data": {"amount": 4}})
    frame = await request(ws, {"type": "state"})
    assert set(frame) == {"type", "data"}
    assert frame["type"] == "state"
    state = frame["data"]
    assert state["episode_id"] == "ep-state"
    assert state["step_count"] == 2
    assert state["seed"] == 5
    assert state["history"] == [2, 4]
    assert isinstance(state["count"], int)


async def test_close_has_no_reply_and_closes_normally(ws) -> None:
    await request(ws, {"type": "reset"})
    await send(ws, {"type": "close"})
    with pytest.raises(ConnectionClosedOK):
        await asyncio.wait_for(ws.recv(), 5)
    assert ws.close_code == 1000


async def test_dropped_connection_closes_env_once(
    counter_server: RunningServer, close_marker: Path
) -> None:
    async with ws_connect(counter_server.ws_url) as conn:
        await request(conn, {"type": "reset", "data": {"episode_id": "dropped-ep"}})
        conn.transport.abort()
    await poll(lambda: "dropped-ep" in closed_episodes(close_marker))
    await asyncio.sleep(0.2)
    assert closed_episodes(close_marker).count("dropped-ep") == 1


async def test_close_message_closes_env_once(
    counter_server: RunningServer, close_marker: Path
) -> None:
    async with ws_connect(counter_server.ws_url) as conn:
        await request(conn, {"type": "reset", "data": {"episode_id": "closed-ep"}})
        await send(conn, {"type": "close"})
        with pytest.raises(ConnectionClosedOK):
            await asyncio.wait_for(conn.recv(), 5)
    await poll(lambda: "closed-ep" in closed_episodes(close_marker))
    await asyncio.sleep(0.2)
    assert closed_episodes(close_marker).count("closed-ep") == 1


async def test_close_frees_the_slot(two_slot_server: RunningServer) -> None:
    await wait_capacity(two_slot_server.url, active_sessions=0)
    async with ws_connect(two_slot_server.ws_url) as conn:
        await request(conn, {"type": "reset"})
        assert capacity(two_slot_server.url)["active_sessions"] == 1
        await send(conn, {"type": "close"})
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(conn.recv(), 5)
    # Freed once: 0, not 1 and not a negative count clamped to 0 (then 2 would fit in 1 slot).
    await wait_capacity(two_slot_server.url, active_sessions=0, queued=0)
    a = await ws_connect(two_slot_server.ws_url)
    b = await ws_connect(two_slot_server.ws_url)
    c = await ws_connect(two_slot_server.ws_url)
    try:
        await request(a, {"type": "reset"})
        await request(b, {"type": "reset"})
        assert capacity(two_slot_server.url)["active_sessions"] == 2
        await send(c, {"type": "reset"})
        with pytest.raises(asyncio.TimeoutError):
            await recv(c, timeout=0.3)
        await a.close()
        assert_observation_frame(await recv(c))
    finally:
        for conn in (a, b, c):
            await conn.close()
    await wait_capacity(two_slot_server.url, active_sessions=0, queued=0)


# -- error frames -------------------------------------------------------------------------


async def test_invalid_json(ws) -> None:
    data = assert_error(await request(ws, "{not json"), "INVALID_JSON", "client")
    assert data["message"].startswith("Invalid JSON")
    # The connection is still usable.
    assert_observation_frame(await request(ws, {"type": "reset"}))


async def test_unknown_type(ws) -> None:
    data = assert_error(await request(ws, {"type": "jump"}), "UNKNOWN_TYPE", "client")
    assert data["message"] == "Unknown message type: jump"
    assert_observation_frame(await request(ws, {"type": "reset"}))


async def test_missing_type_is_unknown_type(ws) -> None:
    assert_error(await request(ws, {"data": {}}), "UNKNOWN_TYPE", "client")


async def test_step_without_data_is_validation_error(ws) -> None:
    data = assert_error(await request(ws, {"type": "step"}), "VALIDATION_ERROR", "client")
    assert data["message"] == "Invalid message"
    assert isinstance(data["errors"], list) and data["errors"]
    assert "data" in data["detail"]


async def test_step_without_data_errors_are_about_step_only(ws) -> None:
    """The envelope is a union discriminated on `type`: only the `step` model's errors apply."""
    data = assert_error(await request(ws, {"type": "step"}), "VALIDATION_ERROR", "client")
    assert len(data["errors"]) == 1, data["errors"]
    assert data["errors"][0]["type"] == "missing"
    assert data["errors"][0]["loc"][-1] == "data"
    assert "reset" not in data["detail"].lower(), data["detail"]


async def test_extra_top_level_key_is_validation_error(ws) -> None:
    data = assert_error(
        await request(ws, {"type": "state", "bogus": 1}), "VALIDATION_ERROR", "client"
    )
    assert isinstance(data["errors"], list) and data["errors"]
    assert any(err["loc"][-1] == "bogus" for err in data["errors"]), data["errors"]
    assert "bogus" in data["detail"]


@pytest.mark.parametrize(
    ("action", "field"),
    [({"amount": "lots"}, "amount"), ({}, "amount"), ({"amount": 1, "colour": "red"}, "colour")],
)
async def test_invalid_action_is_validation_error(ws, action: dict, field: str) -> None:
    data = assert_error(
        await request(ws, {"type": "step", "data": action}), "VALIDATION_ERROR", "client"
    )
    assert data["message"] == "Invalid message"
    assert [err["loc"] for err in data["errors"]] == [[field]]
    assert field in data["detail"]
    # Nothing was applied.
    state = (await request(ws, {"type": "state"}))["data"]
    assert state["step_count"] == 0


async def test_execution_error_keeps_connection_usable(ws) -> None:
    await request(ws, {"type": "reset", "data": {"episode_id": "ep-exec"}})
    await request(ws, {"type": "step", "data": {"amount": 1}})
    data = assert_error(
        await request(ws, {"type": "step", "data": {"amount": 13}}),
        "EXECUTION_ERROR",
        "environment",
    )
    assert "unlucky" in data["message"]
    state = await request(ws, {"type": "state"})
    assert state["type"] == "state"
    assert state["data"]["step_count"] == 1
    assert state["data"]["episode_id"] == "ep-exec"
    step = assert_observation_frame(await request(ws, {"type": "step", "data": {"amount": 1}}))
    assert step["observation"]["count"] == 2


async def test_message_too_large_keeps_connection_usable(ws) -> None:
    await request(ws, {"type": "reset"})
    big = json.dumps(
        {"type": "step", "data": {"amount": 1, "metadata": {"p": "x" * MAX_MESSAGE_BYTES}}}
    )
    data = assert_error(await request(ws, big), "MESSAGE_TOO_LARGE", "client")
    assert data["limit"] == MAX_MESSAGE_BYTES
    # The oversized step was not applied and the connection still works.
    assert (await request(ws, {"type": "state"}))["data"]["step_count"] == 0
    step = assert_observation_frame(await request(ws, {"type": "step", "data": {"amount": 1}}))
    assert step["observation"]["count"] == 1


async def test_message_size_limit_counts_bytes_not_characters(ws) -> None:
    """The limit is in bytes: a text frame of few but multi-byte characters is over it."""
    await request(ws, {"type": "reset"})
    pad = "\u20ac" * (MAX_MESSAGE_BYTES // 3 + 100)  # 3 bytes each in UTF-8
    frame = json.dumps(
        {"type": "step", "data": {"amount": 1, "metadata": {"p": pad}}}, ensure_ascii=False
    )
    assert len(frame) < MAX_MESSAGE_BYTES < len(frame.encode())
    assert_error(await request(ws, frame), "MESSAGE_TOO_LARGE", "client")


async def test_message_too_large_binary_frame(ws) -> None:
    assert_error(await request(ws, b"x" * (MAX_MESSAGE_BYTES + 1)), "MESSAGE_TOO_LARGE", "client")
    assert_observation_frame(await request(ws, {"type": "reset"}))


async def test_binary_json_frame_is_accepted(ws) -> None:
    frame = await request(ws, json.dumps({"type": "reset"}).encode())
    assert_observation_frame(frame)


# -- request ids ------------------------------------------------------------------------------


async def test_request_id_is_echoed(ws) -> None:
    frame = await request(ws, {"type": "reset", "id": "r1"})
    assert frame["id"] == "r1" and frame["type"] == "observation"
    frame = await request(ws, {"type": "step", "id": "abc", "data": {"amount": 1}})
    assert frame["type"] == "observation"
    assert frame["id"] == "abc"
    assert set(frame) == {"type", "data", "id"}
    frame = await request(ws, {"type": "state", "id": 7})
    assert frame["type"] == "state" and frame["id"] == 7
    frame = await request(ws, {"type": "state", "id": 0})
    assert frame["type"] == "state" and frame["id"] == 0
    frame = await request(ws, {"type": "state", "id": ""})
    assert frame["type"] == "state" and frame["id"] == ""


async def test_no_request_id_means_no_id_key(ws) -> None:
    for message in ({"type": "reset"}, {"type": "step", "data": {"amount": 1}}, {"type": "state"}):
        frame = await request(ws, message)
        assert "id" not in frame, frame
    assert "id" not in await request(ws, {"type": "step", "id": None, "data": {"amount": 1}})


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ({"type": "step", "id": "e1", "data": {"amount": 13}}, "EXECUTION_ERROR"),
        ({"type": "step", "id": "e2", "data": {"amount": "x"}}, "VALIDATION_ERROR"),
        ({"type": "step", "id": "e3"}, "VALIDATION_ERROR"),
        ({"type": "state", "id": "e4", "extra": True}, "VALIDATION_ERROR"),
        ({"type": "fly", "id": "e5"}, "UNKNOWN_TYPE"),
    ],
)
async def test_error_frames_carry_request_id(ws, message: dict, code: str) -> None:
    assert_error(await request(ws, message), code, has_id=message["id"])


async def test_close_with_id_then_closed(ws) -> None:
    await send(ws, {"type": "close", "id": "bye"})
    frames = []
    with pytest.raises(ConnectionClosedOK):
        while True:
            frames.append(json.loads(await asyncio.wait_for(ws.recv(), 5)))
    assert all(f.get("id") == "bye" for f in frames), frames
    assert ws.close_code == 1000


# -- malformed input ----------------------------------------------------------------------------

BAD_FRAMES: list[str | bytes] = [
    "",
    " ",
    "null",
    "[]",
    "42",
    '"step"',
    "{",
    '{"type": null}',
    '{"type": 5}',
    '{"type": ["step"]}',
    '{"type": {"a": 1}}',
    '{"type": "step", "data": null}',
    '{"type": "step", "data": [1, 2]}',
    '{"type": "step", "data": "amount"}',
    '{"type": "step", "data": {"amount": 1}, "extra": 1}',
    '{"type": "step", "data": {"amount": 1}, "id": [1]}',
    '{"type": "step", "data": {"amount": 1}, "id": 1.5}',
    '{"type": "reset", "data": 7}',
    '{"type": "state", "id": {"nested": true}}',
    '{"type": "step", "data": {"amount": 1e400}}',
    '{"type": "step", "data": {"amount": NaN}}',
    '{"type": "step", "data": {"amount": 99999999999999999999999999999}}',
    '{"type": "close", "data": {}}',
    "[" * 5000 + "]" * 5000,
    '{"a":' * 2000 + "1" + "}" * 2000,
    b"\xff\xfe\x00\x01",
    b"\x00" * 100,
    "\ud7ff\ue000 not json",
]


@pytest.mark.parametrize("raw", BAD_FRAMES, ids=[repr(f[:24]) for f in BAD_FRAMES])
async def test_bad_frame_gets_client_error_and_connection_survives(ws, raw: str | bytes) -> None:
    frame = await request(ws, raw)
    assert frame["type"] == "error", frame
    assert frame["data"]["category"] == "client", frame
    assert frame["data"]["code"] in {"INVALID_JSON", "UNKNOWN_TYPE", "VALIDATION_ERROR"}, frame
    assert_observation_frame(await request(ws, {"type": "reset"}))


async def test_barrage_of_bad_frames(counter_server: RunningServer) -> None:
    async with ws_connect(counter_server.ws_url) as other:
        await request(other, {"type": "reset", "data": {"episode_id": "bystander"}})
        await request(other, {"type": "step", "data": {"amount": 2}})

        async with ws_connect(counter_server.ws_url) as bad:
            for raw in BAD_FRAMES:
                frame = await request(bad, raw)
                assert frame["type"] == "error", (raw[:40], frame)
                assert frame["data"]["category"] == "client", (raw[:40], frame)
                assert frame["data"]["code"] in {
                    "INVALID_JSON",
                    "UNKNOWN_TYPE",
                    "VALIDATION_ERROR",
                }, (raw[:40], frame)
            # The bad connection itself still works.
            assert_observation_frame(await request(bad, {"type": "reset"}))

        # Other sessions and the server are fine.
        state = (await request(other, {"type": "state"}))["data"]
        assert state["episode_id"] == "bystander" and state["step_count"] == 1
        step = assert_observation_frame(
            await request(other, {"type": "step", "data": {"amount": 1}})
        )
        assert step["observation"]["count"] == 3
    async with httpx.AsyncClient() as http:
        assert (await http.get(f"{counter_server.url}/health")).status_code == 200


async def test_mcp_frame_on_non_mcp_env(ws) -> None:
    frame = await request(
        ws, {"type": "mcp", "data": {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}}
    )
    assert frame["type"] == "mcp"
    assert frame["data"]["id"] == 1
    assert "error" in frame["data"] and "result" not in frame["data"]
    # Still usable.
    assert_observation_frame(await request(ws, {"type": "reset"}))


async def test_recv_is_strictly_one_reply_per_request(ws) -> None:
    for i in range(5):
        await send(ws, {"type": "step", "data": {"amount": 1}, "id": i})
    ids = [(await recv(ws))["id"] for _ in range(5)]
    assert ids == list(range(5))
    with pytest.raises(asyncio.TimeoutError):
        await recv(ws, timeout=0.2)
