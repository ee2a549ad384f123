"""The idle reaper: ends sessions idle past `session_timeout`, and resumable sessions whose
connection dropped more than `resume_grace_s` ago. One task per server, started with the first
session (or the app) and only when one of the two limits is set."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from ..protocol import CLOSE_IDLE_TIMEOUT, CLOSE_NORMAL, session_log_id

if TYPE_CHECKING:
    from .config import ServerConfig
    from .metrics import ServerMetrics
    from .sessions import Session

logger = logging.getLogger("openenv.server")

#: How the reaper ends a session: (session, reason, WebSocket close code).
EndSession = Callable[["Session", str, int], Awaitable[None]]


class IdleReaper:
    """Ends the sessions of `sessions` (a live view, the manager's) that outstayed a limit,
    with `end` (`SessionManager.destroy`)."""

    def __init__(
        self,
        config: ServerConfig,
        sessions: dict[str, Session],
        end: EndSession,
        metrics: ServerMetrics | None = None,
    ) -> None:
        self.config = config
        self.sessions = sessions
        self.end = end
        self.metrics = metrics
        self._task: asyncio.Task[None] | None = None

    def _limits(self) -> list[float]:
        return [t for t in (self.config.session_timeout, self.config.resume_grace_s) if t]

    @property
    def interval(self) -> float:
        """Seconds between two passes: a quarter of the shorter limit, within 0.05-5 s."""
        return max(0.05, min(5.0, min(self._limits()) / 4))

    def ensure_running(self) -> None:
        """Start the reaper's task, unless it runs or there is no limit to enforce."""
        if (self._task is None or self._task.done()) and self._limits():
            self._task = asyncio.get_running_loop().create_task(self._reap_forever())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    async def _reap_forever(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.reap_once()
            except Exception:
                logger.exception("Idle-session reaper failed; it keeps running")

    async def reap_once(self) -> int:
        """End every session past a limit now; how many were ended."""
        now = time.monotonic()
        idle = self.config.session_timeout
        grace = self.config.resume_grace_s
        metrics = self.metrics
        reaped = 0
        for session in list(self.sessions.values()):
            if session.busy:
                continue  # a running call ends by itself or at its deadline
            if session.detached_at is not None and now - session.detached_at > grace:
                await self.end(session, "resume grace period expired", CLOSE_NORMAL)
                reaped += 1
                if metrics is not None:
                    metrics.reaped("resume_grace")
            elif idle is not None and now - session.last_activity > idle:
                logger.info("Closing session %s after %.0fs idle", session_log_id(session.id), idle)
                await self.end(session, f"session idle for more than {idle:g}s", CLOSE_IDLE_TIMEOUT)
                reaped += 1
                if metrics is not None:
                    metrics.reaped("idle")
        return reaped
