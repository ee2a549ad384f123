"""Transport limits of every connection: HTTP header, body and idle timeouts, bounded WS sends.

uvicorn closes an idle keep-alive connection (`timeout_keep_alive`) but never one that connects
and sends nothing, sends its request headers a byte at a time, or stops half-way through a body:
each holds a socket (and, in numbers, the process's file descriptors) for ever. A WebSocket
whose client stops reading makes every send to it wait until the client reads again, and so
does the close frame. The protocol classes here are uvicorn's own with timers added; `runner`
passes them (with the limits read from the environment) to every server it starts.

Settings (environment variables, seconds; empty or 0 disables a timeout):
- `OPENENV_HTTP_HEADER_TIMEOUT` (10): a request's headers must be complete this long after the
  connection opened, or after its first byte on a kept-alive connection.
- `OPENENV_HTTP_BODY_TIMEOUT` (30): a request's body must be complete this long after its headers.
- `OPENENV_HTTP_IDLE_TIMEOUT` (5): an idle kept-alive connection is closed (uvicorn's
  `timeout_keep_alive`).
- `OPENENV_WS_SEND_TIMEOUT` (20): a WebSocket client that leaves a reply unread this long (its
  buffers full) is disconnected; a resumable session stays detached, its outcomes kept for resume.
- `OPENENV_MAX_CONNECTIONS` (4096): HTTP requests arriving while this many connections are
  open get 503 (uvicorn's `limit_concurrency`; WebSocket handshakes are bounded by the session
  pool and its queue instead).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

from starlette.websockets import WebSocket
from uvicorn.protocols.utils import ClientDisconnected
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from openenv import settings

from ..protocol import CLOSE_NORMAL

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # pragma: no cover - httptools is optional
    HttpToolsProtocol = None  # type: ignore[assignment,misc]

logger = logging.getLogger("openenv.server")

#: Scope extension through which the app can drop a WebSocket connection at once.
ABORT_EXTENSION = "openenv.transport.abort"

#: How long a close frame may wait for a client that does not read, before the socket is dropped.
CLOSE_BOUND_S = 5.0

_BODY_408 = b"Request body not received in time"
_RESPONSE_408 = (
    b"HTTP/1.1 408 Request Timeout\r\n"
    b"content-type: text/plain; charset=utf-8\r\n"
    b"content-length: %d\r\n"
    b"connection: close\r\n"
    b"\r\n" % len(_BODY_408)
) + _BODY_408


@dataclass(frozen=True)
class ConnectionLimits:
    """Per-connection timeouts and the connection cap; `None` disables one."""

    header_timeout: Optional[float] = 10.0
    body_timeout: Optional[float] = 30.0
    idle_timeout: float = 5.0
    ws_send_timeout: Optional[float] = 20.0
    max_connections: Optional[int] = 4096

    @classmethod
    def from_env(cls) -> ConnectionLimits:
        # Unset: the default (the settings' defaults are these fields'); blank, 0 or less: off.
        idle = settings.HTTP_IDLE_TIMEOUT.get()
        cap = settings.MAX_CONNECTIONS.get()
        return cls(
            header_timeout=settings.HTTP_HEADER_TIMEOUT.get(),
            body_timeout=settings.HTTP_BODY_TIMEOUT.get(),
            # uvicorn needs a number; a disabled idle timeout is a very long one.
            idle_timeout=idle if idle is not None else 365 * 24 * 3600.0,
            ws_send_timeout=settings.WS_SEND_TIMEOUT.get(),
            max_connections=None if cap is None else int(cap),
        )

    def uvicorn_options(self, http: str, ws: str) -> dict[str, Any]:
        """uvicorn options applying these limits on top of the `http`/`ws` implementations."""
        options: dict[str, Any] = {
            "timeout_keep_alive": self.idle_timeout,
            "limit_concurrency": self.max_connections,
        }
        if ws == "websockets-sansio":
            options["ws"] = functools.partial(BoundedWebSocketProtocol, limits=self)
        if http in ("httptools", "h11"):
            cls = HttpToolsTimeoutProtocol if http == "httptools" else h11_timeout_protocol()
            options["http"] = functools.partial(cls, limits=self)
        return options


class _Timer:
    """One restartable `call_later` handle."""

    __slots__ = ("handle",)

    def __init__(self) -> None:
        self.handle: Optional[asyncio.TimerHandle] = None

    @property
    def armed(self) -> bool:
        return self.handle is not None

    def arm(
        self, loop: asyncio.AbstractEventLoop, delay: Optional[float], fn: Callable[[], None]
    ) -> None:
        self.cancel()
        if delay is not None:
            self.handle = loop.call_later(delay, fn)

    def cancel(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None


class _HTTPTimeouts:
    """Header and body deadlines, shared by the httptools and h11 protocol subclasses."""

    limits: ConnectionLimits
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    cycle: Any

    def __init__(self, *args: Any, limits: ConnectionLimits, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._init_timers(limits)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self._arm_header()

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self._cancel_timers()
        super().connection_lost(exc)  # type: ignore[misc]

    def send_400_response(self, msg: str) -> None:
        self._cancel_timers(for_good=True)
        super().send_400_response(msg)  # type: ignore[misc]

    def _init_timers(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self._header_timer = _Timer()
        self._body_timer = _Timer()
        #: Upgraded to a WebSocket (or answered with an error): HTTP deadlines no longer apply.
        self._timers_off = False

    def _arm_header(self) -> None:
        if not self._header_timer.armed and not self._timers_off:
            self._header_timer.arm(self.loop, self.limits.header_timeout, self._header_expired)

    def _headers_done(self, has_body: bool) -> None:
        self._header_timer.cancel()
        if has_body and not self._body_timer.armed and not self._timers_off:
            self._body_timer.arm(self.loop, self.limits.body_timeout, self._body_expired)

    def _body_done(self) -> None:
        self._body_timer.cancel()

    def _cancel_timers(self, *, for_good: bool = False) -> None:
        self._header_timer.cancel()
        self._body_timer.cancel()
        if for_good:
            self._timers_off = True

    def _header_expired(self) -> None:
        self._header_timer.handle = None
        if not self.transport.is_closing():
            logger.debug("Closing a connection whose request headers did not arrive in time")
            self.transport.close()

    def _body_expired(self) -> None:
        self._body_timer.handle = None
        if self.transport.is_closing():
            return
        cycle = self.cycle
        if cycle is not None and not cycle.response_started:
            # The app sees the client as gone (its body read ends); the client gets a 408.
            cycle.disconnected = True
            cycle.message_event.set()
            self.transport.write(_RESPONSE_408)
        logger.debug("Closing a connection whose request body did not arrive in time")
        self.transport.close()


if HttpToolsProtocol is not None:

    class HttpToolsTimeoutProtocol(_HTTPTimeouts, HttpToolsProtocol):
        """uvicorn's httptools protocol with header and body deadlines."""

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._arm_header()

        def on_headers_complete(self) -> None:
            super().on_headers_complete()
            self._headers_done(has_body=True)

        def on_message_complete(self) -> None:
            self._body_done()
            super().on_message_complete()

        def handle_websocket_upgrade(self) -> None:
            self._cancel_timers(for_good=True)
            super().handle_websocket_upgrade()

else:  # pragma: no cover
    HttpToolsTimeoutProtocol = None  # type: ignore[assignment,misc]


@functools.cache
def h11_timeout_protocol() -> type:
    """uvicorn's h11 protocol with header and body deadlines; made when a server uses h11 (no
    httptools installed), so that one using httptools never imports h11 (~25 ms of its start)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class H11TimeoutProtocol(_HTTPTimeouts, H11Protocol):
        def data_received(self, data: bytes) -> None:
            if self.conn.their_state is h11.IDLE:
                self._arm_header()  # the first bytes of a request on a kept-alive connection
            super().data_received(data)
            state = self.conn.their_state
            if state is h11.SEND_BODY:
                self._headers_done(has_body=True)
            elif state is not h11.IDLE:
                self._header_timer.cancel()
                self._body_done()

        def handle_websocket_upgrade(self, event: Any) -> None:
            self._cancel_timers(for_good=True)
            super().handle_websocket_upgrade(event)

    return H11TimeoutProtocol


class BoundedWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's WebSocket protocol where a send (or close) waits for a non-reading client at
    most `ws_send_timeout`; then the connection is dropped and the send raises, so the task
    sending never hangs. The app can also drop the connection at once (`abort_websocket`)."""

    def __init__(self, *args: Any, limits: ConnectionLimits, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.send_timeout = limits.ws_send_timeout
        self.reading_stopped = False

    def handle_connect(self, event: Any) -> None:
        super().handle_connect(event)
        scope = getattr(self, "scope", None)
        if scope is not None:
            scope["extensions"][ABORT_EXTENSION] = {
                "abort": self.abort,
                "stop_reading": self.stop_reading,
                "frames_waiting": self.frames_waiting,
            }

    def abort(self) -> None:
        """Drop the connection now, discarding whatever the client has not read."""
        if self.disconnected or self.transport is None:
            return
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            # A reset, not a close that keeps trying to deliver megabytes to a peer that
            # does not read: the kernel frees the buffers and the client learns at once.
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()

    def frames_waiting(self) -> bool:
        """A message from the client is queued: the app's next `receive` returns at once."""
        return not self.queue.empty()

    def stop_reading(self) -> None:
        """Read nothing more from this client (its close frame included): the kernel's buffers
        fill and it has to wait. uvicorn's close timer ends the connection."""
        if not self.disconnected and self.transport is not None:
            self.reading_stopped = self.read_paused = True
            self.transport.pause_reading()

    async def send(self, message: Any) -> None:
        if not self.writable.is_set() and not self.disconnected and self.send_timeout is not None:
            try:
                await asyncio.wait_for(self.writable.wait(), self.send_timeout)
            except asyncio.TimeoutError:
                logger.info(
                    "Dropping a WebSocket client that read nothing for %.0fs", self.send_timeout
                )
                self.abort()
                raise ClientDisconnected() from None
        await super().send(message)
        if self.reading_stopped and self.read_paused is False and not self.disconnected:
            # uvicorn resumes reading when it sends a close frame: keep it stopped.
            self.read_paused = True
            self.transport.pause_reading()


def abort_websocket(websocket: WebSocket) -> bool:
    """Drop `websocket`'s connection at once, if the server offers that; True if it did."""
    extension = websocket.scope.get("extensions", {}).get(ABORT_EXTENSION)
    abort = extension.get("abort") if extension else None
    if abort is None:
        return False
    abort()
    return True


def stop_reading(websocket: WebSocket) -> bool:
    """Stop reading from `websocket`'s client, if the server offers that; True if it did."""
    extension = websocket.scope.get("extensions", {}).get(ABORT_EXTENSION)
    stop = extension.get("stop_reading") if extension else None
    if stop is None:
        return False
    stop()
    return True


def frames_waiting_probe(websocket: WebSocket) -> Callable[[], bool] | None:
    """What tells whether `websocket`'s next receive would return without waiting, if the
    server offers that (None: assume it would)."""
    extension = websocket.scope.get("extensions", {}).get(ABORT_EXTENSION)
    return extension.get("frames_waiting") if extension else None


async def close_websocket(
    websocket: WebSocket, code: int = CLOSE_NORMAL, reason: str = "", bound: float = CLOSE_BOUND_S
) -> None:
    """Send a close frame, waiting at most `bound` for a client that does not read; then drop
    the connection. Never raises."""
    try:
        await asyncio.wait_for(websocket.close(code=code, reason=reason), bound)
    except asyncio.TimeoutError:
        abort_websocket(websocket)
    except Exception:
        pass


_closing: set[asyncio.Task[None]] = set()


def close_websocket_soon(
    websocket: WebSocket, code: int = CLOSE_NORMAL, reason: str = ""
) -> asyncio.Task[None]:
    """`close_websocket` on its own task: the caller (the reaper, a resuming connection) never
    waits on a client that does not read."""
    task = asyncio.get_running_loop().create_task(close_websocket(websocket, code, reason))
    _closing.add(task)
    task.add_done_callback(_closing.discard)
    return task


async def wait_closing(timeout: Optional[float] = None) -> None:
    """Wait (at most `timeout`, and never longer than a close takes) for close frames still
    being sent, e.g. before the server exits."""
    bound = CLOSE_BOUND_S + 1.0
    timeout = bound if timeout is None else min(timeout, bound)
    loop = asyncio.get_running_loop()
    pending = {t for t in _closing if t.get_loop() is loop and not t.done()}
    if pending:
        with contextlib.suppress(Exception):
            await asyncio.wait(pending, timeout=timeout)
