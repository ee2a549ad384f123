"""Graceful shutdown on SIGTERM: drain the sessions before uvicorn closes the connections.

uvicorn's own shutdown closes every WebSocket (code 1012) the moment SIGTERM arrives, so the
replies of calls still running are lost. The app therefore takes SIGTERM first: the handler
uvicorn installed is wrapped while the app runs. The wrapper stops the listening sockets, lets
the session manager drain (`SessionManager.drain`: refuse new work, wait up to the grace period
for calls in flight, deliver their replies, end the rest with TIMEOUT, close every session with
1012) and only then hands the signal to uvicorn, which finds no connection left to wait for.

A second SIGTERM (or SIGINT at any time) goes straight to uvicorn. Without a Python-level
handler to wrap (no uvicorn in the main thread), nothing is installed and uvicorn's own
`timeout_graceful_shutdown` applies.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from collections.abc import Awaitable, Callable
from types import FrameType
from typing import Any

logger = logging.getLogger("openenv.server")

Handler = Callable[[int, "FrameType | None"], Any]


class SigtermDrain:
    """Wraps the SIGTERM handler of the server that runs the app (see the module docstring)."""

    def __init__(self, drain: Callable[[], Awaitable[None]]) -> None:
        self._drain = drain
        self._previous: Handler | None = None
        self._installed: Handler | None = None
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def started(self) -> bool:
        return self._task is not None

    def install(self) -> bool:
        """Wrap the current SIGTERM handler; False when there is none to wrap."""
        if threading.current_thread() is not threading.main_thread():
            return False
        previous = signal.getsignal(signal.SIGTERM)
        if not callable(previous):
            return False  # default or ignored: no server of ours to hand the signal to
        self._loop = asyncio.get_running_loop()
        self._previous = previous
        self._installed = self._on_signal
        signal.signal(signal.SIGTERM, self._installed)
        return True

    def uninstall(self) -> None:
        if self._installed is not None and signal.getsignal(signal.SIGTERM) == self._installed:
            signal.signal(signal.SIGTERM, self._previous)
        self._installed = None

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        loop, previous = self._loop, self._previous
        if self._task is not None or loop is None or loop.is_closed() or previous is None:
            if previous is not None:
                previous(signum, frame)  # a second signal: shut down now
            return
        # A signal handler runs between two bytecodes of the loop's thread: only schedule.
        loop.call_soon_threadsafe(self._start, signum, frame)

    def _start(self, signum: int, frame: FrameType | None) -> None:
        if self._task is not None:
            return
        previous = self._previous
        _stop_listening(previous)
        self._task = asyncio.get_running_loop().create_task(self._run(signum, frame))

    async def _run(self, signum: int, frame: FrameType | None) -> None:
        logger.info("SIGTERM: draining sessions before shutdown")
        try:
            await self._drain()
        except Exception:
            logger.exception("Draining sessions failed; shutting down anyway")
        finally:
            if self._previous is not None:
                self._previous(signum, frame)


def _stop_listening(handler: Any) -> None:
    """Close the listening sockets of the uvicorn server whose handler we wrapped, so that no
    new connection is accepted while the sessions drain (connections open stay open)."""
    server = getattr(handler, "__self__", None)
    for listener in getattr(server, "servers", None) or ():
        with contextlib.suppress(Exception):
            listener.close()
