"""WebSocket clients that stop reading must not hold up anyone else (issue 11).

A raw client (a TCP socket with a tiny receive buffer that does the handshake by hand) asks for
one reply far larger than the kernel buffers, then never reads: the server's write buffer stays
full, so every send to it (the close frame included) would wait for ever. The servers run with
`runner.uvicorn_options()`, as `openenv serve` serves.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from openenv.core.env_server.connections import ConnectionLimits
from openenv.core.env_server.runner import uvicorn_options
from openenv.core.protocol import RESUME_TOKEN_HEADER
from tests.conformance.helpers import TIMEOUT, recv, request, ws_connect
from tests.conformance.raw_ws import RawClient
from tests.support.pycache import PYCACHE_ENV
from tests.support.server import RunningServer, serve

#: Larger than any kernel socket buffer on loopback (tcp_wmem max is 4 MB by default): most of
#: the reply stays in the server's own write buffer while the client does not read.
BIG = 12 * 1024 * 1024


def _options(**limits: Any) -> dict[str, Any]:
    options = uvicorn_options()
    options.update(ConnectionLimits(**limits).uvicorn_options(options_http(), "websockets-sansio"))
    return options


def options_http() -> str:
    import importlib.util

    return "httptools" if importlib.util.find_spec("httptools") else "h11"


def _serve_bulky(session_timeout: str, send_timeout: float | None) -> Any:
    env = {
        **PYCACHE_ENV,
        "MAX_CONCURRENT_ENVS": "16",
        "OPENENV_SESSION_TIMEOUT": session_timeout,
        "OPENENV_RESUME_GRACE": "60",
    }
    options = _options(ws_send_timeout=send_timeout)
    return serve("apps.bulky:app", env=env, in_process=True, options=options)


@pytest.fixture(scope="module")
def reaping_server() -> Iterator[RunningServer]:
    """Idle sessions closed after 2 s; sends never time out (only the reaper fix is tested)."""
    with _serve_bulky("2", None) as server:
        yield server


@pytest.fixture(scope="module")
def patient_server() -> Iterator[RunningServer]:
    """No idle timeout and sends that never time out: resume must not wait on the old socket."""
    with _serve_bulky("", None) as server:
        yield server


@pytest.fixture(scope="module")
def strict_server() -> Iterator[RunningServer]:
    """A client that reads nothing for 1 s is dropped."""
    with _serve_bulky("", 1.0) as server:
        yield server


def stuck_client(server: RunningServer, query: str = "resumable=1") -> tuple[RawClient, dict]:
    """A client whose session has one huge reply in flight that it never reads."""
    raw = RawClient(server, query)
    announced = raw.read_frame() if query == "resumable=1" else {}
    raw.send({"type": "reset", "data": {}})
    assert raw.read_frame()["type"] == "observation"
    raw.send({"type": "step", "data": {"size": BIG}, "id": 1})
    raw.wait_readable()
    return raw, announced.get("data", {})


async def test_non_reading_client_does_not_delay_reaping(reaping_server: RunningServer) -> None:
    raw, _ = await asyncio.to_thread(stuck_client, reaping_server, "resumable=0")
    try:
        # Another client's idle session is reaped while the stuck session is reaped too.
        async with ws_connect(reaping_server.ws_url) as other:
            reply = await request(other, {"type": "reset", "data": {}})
            assert reply["type"] == "observation"
            deadline = time.monotonic() + TIMEOUT
            with pytest.raises(Exception) as closed:
                while time.monotonic() < deadline:
                    await recv(other, timeout=max(0.1, deadline - time.monotonic()))
            assert getattr(closed.value, "rcvd", None) is not None, closed.value
            assert closed.value.rcvd.code == 4001  # type: ignore[attr-defined]
        # The stuck connection itself is dropped, not left holding the server's buffers.
        await asyncio.to_thread(raw.wait_dropped)
    finally:
        raw.close()


async def test_resume_while_old_connection_is_stuck(patient_server: RunningServer) -> None:
    raw, session = await asyncio.to_thread(stuck_client, patient_server)
    try:
        headers = {RESUME_TOKEN_HEADER: session["resume_token"]}
        url = f"{patient_server.ws_url}?session_id={session['session_id']}"
        async with ws_connect(url, additional_headers=headers) as conn:
            frame = await recv(conn)
            assert frame["type"] == "session" and frame["data"]["resumed"] is True, frame
            assert frame["data"]["step_count"] == 1
            # The step the old connection never read is answered again, not applied again.
            again = await request(conn, {"type": "step", "data": {"size": 10}, "id": 1})
            assert again["type"] == "observation" and again["id"] == 1
            assert len(again["data"]["observation"]["blob"]) == BIG
            step = await request(conn, {"type": "step", "data": {"size": 3}, "id": 2})
            assert step["data"]["observation"]["blob"] == "xxx"
            await asyncio.to_thread(raw.wait_dropped)
    finally:
        raw.close()


async def test_client_that_does_not_read_is_dropped_and_can_resume(
    strict_server: RunningServer,
) -> None:
    raw, session = await asyncio.to_thread(stuck_client, strict_server)
    try:
        # Its next reply cannot be sent: after the send bound, the connection is dropped.
        await asyncio.to_thread(raw.send, {"type": "step", "data": {"size": 5}, "id": 2})
        await asyncio.to_thread(raw.wait_dropped)
        headers = {RESUME_TOKEN_HEADER: session["resume_token"]}
        url = f"{strict_server.ws_url}?session_id={session['session_id']}"
        async with ws_connect(url, additional_headers=headers) as conn:
            frame = await recv(conn)
            assert frame["type"] == "session" and frame["data"]["resumed"] is True, frame
            assert frame["data"]["step_count"] == 2
            again = await request(conn, {"type": "step", "data": {"size": 1}, "id": 2})
            assert again["id"] == 2 and again["data"]["observation"]["blob"] == "xxxxx"
    finally:
        raw.close()
