"""Per-connection budgets, so one WebSocket's flood cannot take the event loop from the others.

Every WebSocket endpoint (`/ws`, `/mcp`) reads its frames through a `FrameBudget`: after each
frame the connection yields to the others, a connection sending more bytes than its share waits
before its next frame is read (the kernel then makes the client wait), and one sending more
invalid frames than its budget is closed with `CLOSE_POLICY` (1008) and a reason saying so.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from starlette.websockets import WebSocket

from ..protocol import CLOSE_POLICY
from .config import ServerConfig
from .connections import close_websocket, frames_waiting_probe, stop_reading

logger = logging.getLogger("openenv.server")


class TokenBucket:
    """`rate` tokens per second, up to `burst` saved; `rate` 0 or less: unlimited."""

    __slots__ = ("_at", "_tokens", "burst", "rate")

    def __init__(self, rate: float, burst: float | None = None) -> None:
        self.rate = rate
        self.burst = float(rate if burst is None else burst)
        self._tokens = self.burst
        self._at = time.monotonic()

    def take(self, amount: float = 1.0) -> float:
        """Spend `amount`; the seconds until the budget is whole again (0.0: within it)."""
        if self.rate <= 0:
            return 0.0
        now = time.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        self._tokens -= amount
        return 0.0 if self._tokens >= 0.0 else -self._tokens / self.rate


class FrameBudget:
    """The invalid-frame and byte budgets of one WebSocket connection."""

    __slots__ = ("frames_waiting", "inbound", "invalid", "invalid_limit")

    def __init__(self, config: ServerConfig, websocket: WebSocket | None = None) -> None:
        limit = config.ws_invalid_frame_limit
        self.invalid_limit = limit
        # Bursts of ten seconds' worth: a fuzzing test or a buggy client is answered for a while.
        self.invalid = TokenBucket(limit, 10 * limit)
        rate = config.ws_bytes_per_s
        self.inbound = TokenBucket(rate, max(2 * config.max_message_bytes, rate))
        #: Whether the connection's next frame is already queued (None: unknown, assume so).
        self.frames_waiting: Callable[[], bool] | None = (
            frames_waiting_probe(websocket) if websocket is not None else None
        )

    async def after_frame(self, websocket: WebSocket, size: int, refused: bool) -> bool:
        """Account for a frame of `size` bytes once answered; False: the connection was closed
        for a flood of invalid frames (the session itself stays; a resumable one can resume)."""
        if refused and self.invalid.take():
            logger.warning(
                "Closing a WebSocket that sent more than %d invalid messages per second",
                self.invalid_limit,
            )
            # Parsing (to discard) what it keeps sending until its close reply would cost as
            # much as answering it: read nothing more; uvicorn's close timer ends it.
            stop_reading(websocket)
            reason = f"more than {self.invalid_limit} invalid messages per second"
            await close_websocket(websocket, CLOSE_POLICY, reason)
            return False
        # Let other connections run between two frames of this one, even when every frame is
        # answered without waiting (errors, async environments). With no frame queued the next
        # receive waits anyway, and an extra pass of the loop per frame is a third of a step.
        delay = self.inbound.take(size)
        waiting = self.frames_waiting
        if delay or waiting is None or waiting():
            await asyncio.sleep(delay)
        return True
