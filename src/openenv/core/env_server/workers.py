"""Multi-process serving where every session stays on the process that holds it.

On Linux every worker binds its own listening socket to the port with SO_REUSEPORT, so the
kernel spreads new connections evenly over the workers (a shared socket lets whichever process
wins the accept race take them all). Elsewhere the workers accept on one inherited socket. Each
worker also listens on its own Unix socket and prefixes the session ids it issues with its name
(`w3.`). A request that names another worker's session (HTTP session header, `session_id` query,
`Mcp-Session-Id`, or `params.session_id` in an `/mcp` body) arrives on whichever worker the
kernel picked; that worker forwards it over the owner's Unix socket, WebSockets included.
`/metrics` (when on) is answered by any worker with the sum of all of them: it asks the others
over the same sockets (see metrics.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import signal
import socket
import tempfile
from typing import TYPE_CHECKING, Any, Optional

from starlette.types import ASGIApp, Receive, Scope, Send

from openenv import settings

from ..protocol import (
    CLOSE_INTERNAL_ERROR,
    CLOSE_NORMAL,
    RESUME_TOKEN_HEADER,
    SESSION_HEADER,
    loads,
    session_id_from_rpc,
    session_id_from_scope,
)
from .asgi import read_body, replay
from .runner import import_app

if TYPE_CHECKING:
    import httpx

logger = logging.getLogger("openenv.server")

WORKER_ID_ENV = settings.WORKER_ID.name
WORKER_DIR_ENV = settings.WORKER_DIR.name


def worker_prefix() -> str:
    """The session-id prefix of this process ("" when not running under the supervisor)."""
    worker = settings.WORKER_ID.get()
    return f"{worker}." if worker else ""


#: Handshake headers a worker forwards with a WebSocket it hands to the session's owner.
_FORWARDED_WS_HEADERS = frozenset(
    name.lower().encode()
    for name in (RESUME_TOKEN_HEADER, SESSION_HEADER, "authorization", "origin")
)


def _owner(session_id: str) -> Optional[str]:
    head, dot, _ = session_id.partition(".")
    return head if dot and head.startswith("w") and head[1:].isdigit() else None


class WorkerRouter:
    """ASGI middleware that forwards requests for other workers' sessions to their owner."""

    def __init__(self, app: ASGIApp) -> None:
        # Here, not at module import: every server imports this module (worker_prefix), only
        # a multi-worker one forwards, and httpx costs ~20-50 ms of a server's start.
        import httpx  # noqa: F401

        self.app = app
        self.me = settings.WORKER_ID.get() or ""
        self.directory = settings.WORKER_DIR.get() or ""
        self._clients: dict[str, httpx.AsyncClient] = {}

    def _socket_path(self, worker: str) -> str:
        return os.path.join(self.directory, f"{worker}.sock")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or not self.directory:
            await self.app(scope, receive, send)
            return
        owner = None
        sid = session_id_from_scope(scope)
        if sid:
            owner = _owner(sid)
        body: Optional[bytes] = None
        if (
            owner is None
            and scope["type"] == "http"
            and scope["path"] == "/mcp"
            and scope["method"] == "POST"
        ):
            body = await read_body(receive) or b""
            try:
                message = loads(body)
            except ValueError:
                message = None
            rpc_sid = session_id_from_rpc(
                message.get("params") if isinstance(message, dict) else None
            )
            if rpc_sid:
                owner = _owner(rpc_sid)
        if owner is None or owner == self.me or scope.get("openenv_forwarded"):
            if body is not None:
                receive = replay(body, receive)
            await self.app(scope, receive, send)
            return
        if scope["type"] == "http":
            await self._forward_http(owner, scope, receive, send, body)
        else:
            await self._forward_ws(owner, scope, receive, send)

    async def _forward_http(
        self, owner: str, scope: Scope, receive: Receive, send: Send, body: Optional[bytes]
    ) -> None:
        import httpx

        client = self._clients.get(owner)
        if client is None:
            transport = httpx.AsyncHTTPTransport(uds=self._socket_path(owner))
            client = httpx.AsyncClient(transport=transport, base_url="http://worker", timeout=None)
            self._clients[owner] = client
        if body is None:
            body = await read_body(receive) or b""
        headers = [(k, v) for k, v in scope["headers"] if k not in (b"host", b"content-length")]
        path = scope["path"] + (
            ("?" + scope["query_string"].decode()) if scope["query_string"] else ""
        )
        try:
            response = await client.request(scope["method"], path, headers=headers, content=body)
        except httpx.HTTPError as exc:
            logger.warning("Forwarding to worker %s failed: %s", owner, exc)
            await _send_simple(send, 502, b'{"detail":"session owner worker unreachable"}')
            return
        out_headers = [
            (k.encode(), v.encode())
            for k, v in response.headers.items()
            if k.lower() not in ("content-length", "transfer-encoding", "connection")
        ]
        out_headers.append((b"content-length", str(len(response.content)).encode()))
        await send(
            {"type": "http.response.start", "status": response.status_code, "headers": out_headers}
        )
        await send({"type": "http.response.body", "body": response.content})

    async def _forward_ws(self, owner: str, scope: Scope, receive: Receive, send: Send) -> None:
        from websockets.asyncio.client import unix_connect
        from websockets.exceptions import ConnectionClosed

        first = await receive()
        if first["type"] != "websocket.connect":
            return
        query = scope.get("query_string", b"").decode()
        uri = f"ws://worker{scope['path']}" + (f"?{query}" if query else "")
        # The owner checks what the client proved (resume token, credentials): pass it on.
        passed = [
            (k.decode("latin-1"), v.decode("latin-1"))
            for k, v in scope["headers"]
            if k.lower() in _FORWARDED_WS_HEADERS
        ]
        try:
            upstream = await unix_connect(
                self._socket_path(owner),
                uri,
                additional_headers=passed or None,
                subprotocols=scope.get("subprotocols") or None,
                max_size=None,
                compression=None,
            )
        except Exception as exc:
            logger.warning("Forwarding a WebSocket to worker %s failed: %s", owner, exc)
            await send({"type": "websocket.close", "code": CLOSE_INTERNAL_ERROR})
            return
        await send({"type": "websocket.accept", "subprotocol": upstream.subprotocol})

        async def downstream() -> None:
            with contextlib.suppress(ConnectionClosed):
                async for frame in upstream:
                    key = "text" if isinstance(frame, str) else "bytes"
                    await send({"type": "websocket.send", key: frame})
            code = upstream.close_code or CLOSE_NORMAL
            with contextlib.suppress(Exception):
                await send(
                    {"type": "websocket.close", "code": code, "reason": upstream.close_reason or ""}
                )

        pump = asyncio.get_running_loop().create_task(downstream())
        try:
            while True:
                message = await receive()
                if message["type"] == "websocket.disconnect":
                    break
                data = message.get("text")
                if data is None:
                    data = message.get("bytes") or b""
                try:
                    await upstream.send(data)
                except ConnectionClosed:
                    break
        finally:
            # Closing upstream abruptly lets the owner treat this like a dropped connection.
            upstream.transport.abort()
            pump.cancel()
            with contextlib.suppress(BaseException):
                await pump


async def _send_simple(send: Send, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _reuse_port_supported() -> bool:
    # Only Linux balances connections over SO_REUSEPORT listeners; BSDs hand them to one socket.
    return hasattr(socket, "SO_REUSEPORT") and os.uname().sysname == "Linux"


def _listening_socket(host: str, port: int, *, reuse_port: bool, listen: bool) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    if listen:
        sock.listen(2048)
    return sock


def _worker_main(
    app: str,
    index: int,
    directory: str,
    public: socket.socket | tuple[str, int],
    options: dict[str, Any],
) -> None:
    os.environ[WORKER_ID_ENV] = f"w{index}"
    os.environ[WORKER_DIR_ENV] = directory
    import uvicorn

    if isinstance(public, tuple):
        public = _listening_socket(*public, reuse_port=True, listen=True)
    path = os.path.join(directory, f"w{index}.sock")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind(path)
    unix.listen(2048)
    config = uvicorn.Config(import_app(app), **options)
    server = uvicorn.Server(config)
    server.run(sockets=[public, unix])


def serve_workers(app: str, host: str, port: int, workers: int, options: dict[str, Any]) -> None:
    """Run `workers` processes of `app` on one port, sessions pinned to their process."""
    reuse_port = _reuse_port_supported()
    # A plain bind first: it fails if anything holds the port, even another server that also
    # uses SO_REUSEPORT, which the kernel would otherwise let us share silently.
    try:
        sock = _listening_socket(host, port, reuse_port=False, listen=not reuse_port)
    except OSError as exc:
        raise SystemExit(
            f"error: cannot bind {host}:{port}: {exc.strerror}. "
            "Stop the process holding the port or choose another --port."
        ) from None
    if reuse_port:
        # The supervisor's socket only holds the port; it never listens, so gets no connections.
        port = sock.getsockname()[1]
        sock.close()
        sock = _listening_socket(host, port, reuse_port=True, listen=False)
    sock.set_inheritable(True)
    public: socket.socket | tuple[str, int] = (host, port) if reuse_port else sock
    directory = tempfile.mkdtemp(prefix="openenv-workers-")
    context = multiprocessing.get_context("spawn")
    processes = [
        context.Process(
            target=_worker_main, args=(app, i, directory, public, options), daemon=False
        )
        for i in range(workers)
    ]
    for process in processes:
        process.start()
    logger.info("Serving %s on %s:%d with %d workers", app, host, port, workers)

    stopping = False

    def stop(signum: int, frame: Any) -> None:
        nonlocal stopping
        stopping = True
        for process in processes:
            if process.is_alive() and process.pid is not None:
                os.kill(process.pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        for process in processes:
            process.join()
    finally:
        sock.close()
        for name in os.listdir(directory):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(directory, name))
        with contextlib.suppress(OSError):
            os.rmdir(directory)
