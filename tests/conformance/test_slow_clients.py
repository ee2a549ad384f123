"""WebSocket clients that stop reading must not hold up anyone else (issue 11).

A raw client (a TCP socket with a tiny receive buffer that does the handshake by hand) asks for
one reply far larger than the kernel buffers, then never reads: the server's write buffer stays
full, so every send to it (the close frame included) would wait for ever. The servers run with
`runner.uvicorn_options()`, as `openenv serve` serves.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import select
import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest

from openenv.core.env_server.connections import ConnectionLimits
from openenv.core.env_server.runner import uvicorn_options
from openenv.core.protocol import RESUME_TOKEN_HEADER
from tests.conformance.helpers import TIMEOUT, recv, request, ws_connect
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


class RawClient:
    """A WebSocket client on a bare socket that reads only when told to."""

    def __init__(self, server: RunningServer, query: str = "resumable=1") -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(TIMEOUT)
        sock.connect(("127.0.0.1", server.port))
        key = base64.b64encode(os.urandom(16)).decode()
        sock.sendall(
            (
                f"GET /ws?{query} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
                "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        self.sock = sock
        self.buffer = b""
        head = self._read_until(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101"), head

    def _read_until(self, marker: bytes) -> bytes:
        while marker not in self.buffer:
            chunk = self.sock.recv(65536)
            assert chunk, "connection closed during the handshake"
            self.buffer += chunk
        head, _, self.buffer = self.buffer.partition(marker)
        return head

    def _read_exact(self, n: int) -> bytes:
        while len(self.buffer) < n:
            chunk = self.sock.recv(65536)
            assert chunk, "connection closed"
            self.buffer += chunk
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def read_frame(self) -> dict[str, Any]:
        b0, b1 = self._read_exact(2)
        assert b0 & 0x0F == 0x1, f"expected a text frame, got opcode {b0 & 0x0F}"
        length = b1 & 0x7F
        if length == 126:
            (length,) = struct.unpack("!H", self._read_exact(2))
        elif length == 127:
            (length,) = struct.unpack("!Q", self._read_exact(8))
        return json.loads(self._read_exact(length))

    def send(self, message: dict[str, Any]) -> None:
        payload = json.dumps(message).encode()
        n = len(payload)
        if n < 126:
            header = struct.pack("!BB", 0x81, 0x80 | n)
        elif n < 65536:
            header = struct.pack("!BBH", 0x81, 0x80 | 126, n)
        else:
            header = struct.pack("!BBQ", 0x81, 0x80 | 127, n)
        self.sock.sendall(header + b"\0\0\0\0" + payload)  # an all-zero mask leaves it as is

    def wait_readable(self) -> None:
        """Until the server has started writing to us (nothing is read)."""
        ready, _, _ = select.select([self.sock], [], [], TIMEOUT)
        assert ready, "the server never started the reply"

    def wait_dropped(self, timeout: float = TIMEOUT) -> None:
        """Until the server resets or closes the connection, without reading a byte."""
        poller = select.poll()
        poller.register(self.sock, select.POLLRDHUP | select.POLLHUP | select.POLLERR)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for _, events in poller.poll(200):
                if events & (select.POLLHUP | select.POLLERR | select.POLLRDHUP):
                    return
        raise AssertionError(f"the server kept the non-reading connection open for {timeout}s")

    def close(self) -> None:
        self.sock.close()


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
