"""HTTP connections that stall are closed (issue 11): silent, slow-header, partial-body, idle.

The servers run with `runner.uvicorn_options()` (as every serve path does) under short
timeouts, on both HTTP implementations uvicorn offers.
"""

from __future__ import annotations

import importlib.util
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from openenv.core.env_server.connections import ConnectionLimits
from openenv.core.env_server.runner import uvicorn_options
from tests.conformance.helpers import TIMEOUT
from tests.support.pycache import PYCACHE_ENV
from tests.support.server import RunningServer, serve

IMPLEMENTATIONS = ["h11"] + (["httptools"] if importlib.util.find_spec("httptools") else [])


@pytest.fixture(scope="module", params=IMPLEMENTATIONS)
def timeout_server(request: pytest.FixtureRequest) -> Iterator[RunningServer]:
    http = request.param
    options = uvicorn_options()
    limits = ConnectionLimits(header_timeout=1.0, body_timeout=1.0, idle_timeout=1.0)
    options.update(limits.uvicorn_options(http, "websockets-sansio"))
    env = {**PYCACHE_ENV, "MAX_CONCURRENT_ENVS": "8"}
    with serve("apps.counter:app", env=env, in_process=True, options=options) as server:
        yield server


def _connect(server: RunningServer) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT)
    return sock


def _read_until_closed(sock: socket.socket, timeout: float = TIMEOUT) -> bytes:
    """Everything the server sends until it closes the connection (fails if it never does)."""
    received = b""
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"connection still open after {timeout}s; got {received[:200]!r}")
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return received
        except TimeoutError:
            continue
        if not chunk:
            return received
        received += chunk


def test_stalled_connections_are_closed(timeout_server: RunningServer) -> None:
    host = f"Host: 127.0.0.1:{timeout_server.port}\r\n".encode()
    silent = [_connect(timeout_server) for _ in range(20)]
    slow_header = [_connect(timeout_server) for _ in range(20)]
    partial_body = [_connect(timeout_server) for _ in range(10)]
    for sock in slow_header:
        sock.sendall(b"GET /health HTTP/1.1\r\n" + host + b"X-Slow: ")
    body_head = b"POST /reset HTTP/1.1\r\n" + host
    body_head += b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
    for sock in partial_body:
        sock.sendall(body_head)
    try:
        # A trickle of header bytes does not keep a connection open past the header deadline.
        trickle = _connect(timeout_server)
        trickle.sendall(b"GET /health HTTP/1.1\r\n")
        deadline = time.monotonic() + TIMEOUT
        with pytest.raises((BrokenPipeError, ConnectionResetError)):
            while time.monotonic() < deadline:
                trickle.sendall(b"X-A: b\r\n")
                time.sleep(0.1)
        trickle.close()
        # Normal requests are served meanwhile.
        with httpx.Client(base_url=timeout_server.url, timeout=TIMEOUT) as client:
            assert client.get("/health").status_code == 200
            assert client.post("/reset", json={}).status_code == 200
        for sock in silent + slow_header:
            assert _read_until_closed(sock) == b""
        for sock in partial_body:
            assert _read_until_closed(sock).startswith(b"HTTP/1.1 408 ")
    finally:
        for sock in silent + slow_header + partial_body:
            sock.close()


def test_idle_keep_alive_connection_is_closed(timeout_server: RunningServer) -> None:
    with _connect(timeout_server) as sock:
        for _ in range(2):  # the header deadline starts again for each request
            sock.sendall(
                f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{timeout_server.port}\r\n\r\n".encode()
            )
            response = b""
            while b"\r\n\r\n" not in response:
                chunk = sock.recv(65536)
                assert chunk, response
                response += chunk
            assert response.startswith(b"HTTP/1.1 200 "), response
            # read the small JSON body
            head, _, body = response.partition(b"\r\n\r\n")
            length = int(
                next(
                    line.split(b":", 1)[1]
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
            )
            while len(body) < length:
                body += sock.recv(65536)
        assert _read_until_closed(sock) == b""


def test_websocket_connections_outlive_the_http_timeouts(timeout_server: RunningServer) -> None:
    """The header and body deadlines end with the upgrade: a quiet WebSocket stays open."""
    from websockets.sync.client import connect

    with connect(timeout_server.ws_url, open_timeout=TIMEOUT, proxy=None) as ws:
        ws.send('{"type": "reset", "data": {}}')
        assert '"observation"' in str(ws.recv(timeout=TIMEOUT))
        time.sleep(2.5)  # longer than every HTTP timeout of this server
        ws.send('{"type": "step", "data": {"amount": 1}}')
        assert '"observation"' in str(ws.recv(timeout=TIMEOUT))


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import pickle

    monkeypatch.setenv("OPENENV_HTTP_HEADER_TIMEOUT", "3")
    monkeypatch.setenv("OPENENV_HTTP_BODY_TIMEOUT", "")
    monkeypatch.setenv("OPENENV_HTTP_IDLE_TIMEOUT", "7")
    monkeypatch.setenv("OPENENV_WS_SEND_TIMEOUT", "0")
    monkeypatch.setenv("OPENENV_MAX_CONNECTIONS", "50")
    options = uvicorn_options()
    assert options["timeout_keep_alive"] == 7.0
    assert options["limit_concurrency"] == 50
    limits = options["http"].keywords["limits"]
    assert limits == ConnectionLimits(
        header_timeout=3.0,
        body_timeout=None,
        idle_timeout=7.0,
        ws_send_timeout=None,
        max_connections=50,
    )
    # Worker processes are spawned: the options must survive pickling.
    assert pickle.loads(pickle.dumps(options))["http"].keywords["limits"] == limits
    monkeypatch.setenv("OPENENV_HTTP_HEADER_TIMEOUT", "soon")
    with pytest.raises(ValueError, match="OPENENV_HTTP_HEADER_TIMEOUT"):
        uvicorn_options()
