"""A WebSocket client on a bare socket: it reads only when told to and sends whatever it likes."""

from __future__ import annotations

import base64
import json
import os
import select
import socket
import struct
import time
from typing import Any

from tests.conformance.helpers import TIMEOUT
from tests.support.server import RunningServer


class RawClient:
    """A WebSocket client on a bare socket that reads only when told to."""

    def __init__(
        self, server: RunningServer, query: str = "resumable=1", path: str = "/ws"
    ) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(TIMEOUT)
        sock.connect(("127.0.0.1", server.port))
        key = base64.b64encode(os.urandom(16)).decode()
        sock.sendall(
            (
                f"GET {path}?{query} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
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

    def read_raw_frame(self) -> tuple[int, bytes]:
        """(opcode, payload) of the next frame from the server."""
        b0, b1 = self._read_exact(2)
        length = b1 & 0x7F
        if length == 126:
            (length,) = struct.unpack("!H", self._read_exact(2))
        elif length == 127:
            (length,) = struct.unpack("!Q", self._read_exact(8))
        return b0 & 0x0F, self._read_exact(length)

    def read_frame(self) -> dict[str, Any]:
        opcode, payload = self.read_raw_frame()
        assert opcode == 0x1, f"expected a text frame, got opcode {opcode}: {payload[:100]!r}"
        return json.loads(payload)

    def send(self, message: dict[str, Any] | bytes) -> None:
        self.sock.sendall(self.frame(message))

    @staticmethod
    def frame(message: dict[str, Any] | bytes) -> bytes:
        """A masked text frame (an all-zero mask leaves the payload as is)."""
        payload = message if isinstance(message, bytes) else json.dumps(message).encode()
        n = len(payload)
        if n < 126:
            header = struct.pack("!BB", 0x81, 0x80 | n)
        elif n < 65536:
            header = struct.pack("!BBH", 0x81, 0x80 | 126, n)
        else:
            header = struct.pack("!BBQ", 0x81, 0x80 | 127, n)
        return header + b"\0\0\0\0" + payload

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
