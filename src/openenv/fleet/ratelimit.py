"""A limit on environment creations per second, shared by everything one fleet starts.

Cloud sandbox services cap creates (and bill or ban past the cap); a fleet that starts a
thousand servers at once must space them out itself. A server start waits for its turn here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Optional


class CreationRateLimiter:
    """At most `per_s` grants per second, evenly spaced (no bursts); None grants at once.

    `clock` and `sleep` are injectable so the spacing can be checked without waiting."""

    def __init__(
        self,
        per_s: Optional[float],
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if per_s is not None and per_s <= 0:
            raise ValueError(f"max_creates_per_s must be positive, got {per_s}")
        self.per_s = per_s
        self._clock = clock
        self._sleep = sleep
        self._next_at: Optional[float] = None
        #: Grants given so far: every creation passes here exactly once.
        self.granted = 0

    async def wait_turn(self) -> None:
        """Return when the next creation may start (turns are claimed in call order)."""
        self.granted += 1
        if self.per_s is None:
            return
        now = self._clock()
        turn = now if self._next_at is None or self._next_at < now else self._next_at
        self._next_at = turn + 1.0 / self.per_s
        if turn > now:
            await self._sleep(turn - now)


def effective_rate(*limits: Optional[float]) -> Optional[float]:
    """The strictest of the limits given (None: no limit)."""
    given = [limit for limit in limits if limit is not None]
    return min(given) if given else None
