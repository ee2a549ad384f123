"""Time limits of many concurrent calls on one timer per event loop.

`asyncio.timeout` arms and disarms a loop timer for every call (under uvloop a libuv timer
handle made and closed each time), 3-8 µs of an MCP tool call that itself costs ~35 µs. Tool
calls nearly all share one limit (30 s unless the caller gives another), and the deadlines of
one limit expire in the order they were set. So each limit keeps its calls in insertion order
(a dict: O(1) to add and remove) and a single timer per loop is armed at the earliest head;
it is re-armed only when a call with a shorter limit comes in or when it fires.

An expired call is cancelled and its `CancelledError` becomes `TimeoutError`, as
`asyncio.timeout` does (including `uncancel`, so a cancellation from elsewhere still wins).
"""

from __future__ import annotations

import asyncio
import math
import weakref
from typing import Any


class Deadline:
    """One call's time limit; `finish()` it when the call ends, however it ends."""

    __slots__ = ("_owner", "cancelling", "expired", "limit", "task", "when")

    def __init__(self, owner: _LoopDeadlines, limit: float, task: Any) -> None:
        self._owner = owner
        self.limit = limit
        self.when = owner.loop.time() + limit
        self.task = task  # an asyncio.Task (Any: `cancelling`/`uncancel` are Python 3.11+)
        self.cancelling: int = self.task.cancelling()
        self.expired = False

    def finish(self, exc: BaseException | None = None) -> None:
        """End the limit. With the call's `CancelledError`, raises `TimeoutError` if it was this
        deadline that cancelled the call (and nothing else did)."""
        if not self.expired:
            self._owner.remove(self)
            return
        if self.task.uncancel() <= self.cancelling and isinstance(exc, asyncio.CancelledError):
            raise TimeoutError from exc


class _LoopDeadlines:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        #: limit -> the live deadlines of that limit, oldest (earliest) first.
        self.by_limit: dict[float, dict[Deadline, None]] = {}
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at = math.inf

    def add(self, deadline: Deadline) -> None:
        group = self.by_limit.get(deadline.limit)
        if group is None:
            group = self.by_limit[deadline.limit] = {}
        group[deadline] = None
        if deadline.when < self.timer_at:
            self._arm(deadline.when)

    def remove(self, deadline: Deadline) -> None:
        group = self.by_limit.get(deadline.limit)
        if group is not None:
            group.pop(deadline, None)
            if not group:
                del self.by_limit[deadline.limit]
        # The timer stays armed: if it fires for a deadline gone since, it re-arms at the next.

    def _arm(self, when: float) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer = self.loop.call_at(when, self._fire)
        self.timer_at = when

    def _fire(self) -> None:
        self.timer, self.timer_at = None, math.inf
        now = self.loop.time()
        earliest = math.inf
        for limit, group in list(self.by_limit.items()):
            while group:
                head = next(iter(group))
                if head.when > now:
                    earliest = min(earliest, head.when)
                    break
                del group[head]
                head.expired = True
                head.task.cancel()
            if not group:
                del self.by_limit[limit]
        if earliest < math.inf:
            self._arm(earliest)


_per_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopDeadlines] = (
    weakref.WeakKeyDictionary()
)


def start_deadline(limit: float) -> Deadline:
    """A time limit of `limit` seconds on the current task, from now."""
    loop = asyncio.get_running_loop()
    owner = _per_loop.get(loop)
    if owner is None:
        owner = _per_loop[loop] = _LoopDeadlines(loop)
    task = asyncio.current_task(loop)
    if task is None:
        raise RuntimeError("a call deadline needs to run inside a task")
    deadline = Deadline(owner, limit, task)
    owner.add(deadline)
    return deadline
