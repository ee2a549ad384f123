"""A connection flooding invalid frames is closed with a reason; other sessions carry on (issue 11).

Latency under floods is measured by `bench/fairness.py`, not here.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterator

import pytest

from openenv.core.env_server.runner import uvicorn_options
from openenv.core.protocol import RESUME_TOKEN_HEADER
from tests.conformance.helpers import recv, request, ws_connect
from tests.conformance.raw_ws import RawClient
from tests.support.pycache import PYCACHE_ENV
from tests.support.server import RunningServer, serve

LIMIT = 50  # invalid messages per second


@pytest.fixture(scope="module")
def flood_server() -> Iterator[RunningServer]:
    env = {
        **PYCACHE_ENV,
        "MAX_CONCURRENT_ENVS": "8",
        "OPENENV_SESSION_TIMEOUT": "",
        "OPENENV_RESUME_GRACE": "60",
        "OPENENV_WS_INVALID_FRAME_LIMIT": str(LIMIT),
    }
    with serve("apps.counter:app", env=env, in_process=True, options=uvicorn_options()) as server:
        yield server


def _flood_until_closed(raw: RawClient, frames: int) -> tuple[int, str, int]:
    """Send `frames` invalid frames at once; read replies until the close frame.

    Returns (close code, close reason, error replies before it)."""
    raw.sock.sendall(RawClient.frame(b"not json") * frames)
    errors = 0
    while True:
        opcode, payload = raw.read_raw_frame()
        if opcode == 0x8:
            (code,) = struct.unpack("!H", payload[:2])
            return code, payload[2:].decode(), errors
        assert opcode == 0x1
        errors += 1


async def test_invalid_frame_flood_closes_the_connection(flood_server: RunningServer) -> None:
    async with ws_connect(flood_server.ws_url) as other:
        assert (await request(other, {"type": "reset", "data": {"seed": 1}}))[
            "type"
        ] == "observation"
        raw = await asyncio.to_thread(RawClient, flood_server)
        try:
            announced = await asyncio.to_thread(raw.read_frame)
            code, reason, errors = await asyncio.to_thread(_flood_until_closed, raw, 20 * LIMIT)
        finally:
            raw.close()
        assert code == 1008, (code, reason)
        assert f"more than {LIMIT} invalid messages per second" in reason
        assert LIMIT <= errors < 20 * LIMIT  # each was answered until the budget ran out
        # The other session never noticed.
        step = await request(other, {"type": "step", "data": {"amount": 2}})
        assert step["type"] == "observation"
    # The flooder's (resumable) session was kept: its client can come back and behave.
    data = announced["data"]
    headers = {RESUME_TOKEN_HEADER: data["resume_token"]}
    url = f"{flood_server.ws_url}?session_id={data['session_id']}"
    async with ws_connect(url, additional_headers=headers) as conn:
        frame = await recv(conn)
        assert frame["type"] == "session" and frame["data"]["resumed"] is True
        reply = await request(conn, {"type": "reset", "data": {}})
        assert reply["type"] == "observation"


async def test_a_few_invalid_frames_are_answered_not_punished(flood_server: RunningServer) -> None:
    async with ws_connect(flood_server.ws_url) as conn:
        for _ in range(LIMIT // 2):
            reply = await request(conn, "not json")
            assert reply["type"] == "error" and reply["data"]["code"] == "INVALID_JSON"
        assert (await request(conn, {"type": "reset", "data": {}}))["type"] == "observation"


async def test_invalid_frame_flood_on_mcp_socket_closes_it(flood_server: RunningServer) -> None:
    """WebSocket `/mcp` reads through the same budget as `/ws`."""
    async with ws_connect(flood_server.ws_url) as other:
        assert (await request(other, {"type": "reset", "data": {}}))["type"] == "observation"
        raw = await asyncio.to_thread(RawClient, flood_server, "", "/mcp")
        try:
            code, reason, errors = await asyncio.to_thread(_flood_until_closed, raw, 20 * LIMIT)
        finally:
            raw.close()
        assert code == 1008, (code, reason)
        assert f"more than {LIMIT} invalid messages per second" in reason
        assert LIMIT <= errors < 20 * LIMIT
        step = await request(other, {"type": "step", "data": {"amount": 1}})
        assert step["type"] == "observation"
