"""Sync environment calls on worker threads, at a fraction of `run_in_executor`'s cost.

`loop.run_in_executor` pays for a `concurrent.futures.Future`, a lock and a work item per
call, and a wake-up of the loop per result. Environment steps are often a few microseconds of
Python, so that overhead is most of a step. Here a call is one tuple on a `SimpleQueue`, and
workers hand results back in batches: one loop wake-up carries every result that finished
while the loop was busy. Threads start on demand, when no worker is idle, up to a limit.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable
from queue import SimpleQueue
from typing import Any, Optional

_STOP = object()


class _Inbox:
    """Results waiting for one event loop, delivered by one wake-up of that loop."""

    __slots__ = ("loop", "results", "wakeup_pending")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.results: deque[tuple[asyncio.Future[Any], Optional[BaseException], Any]] = deque()
        self.wakeup_pending = False


class CallDispatcher:
    """A small thread pool for sync calls made from event loops."""

    def __init__(self, max_threads: int, name: str = "openenv-env") -> None:
        if max_threads < 1:
            raise ValueError("max_threads must be at least 1")
        self._max = max_threads
        self._name = name
        self._calls: SimpleQueue[Any] = SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._lock = threading.Lock()
        self._inboxes: dict[asyncio.AbstractEventLoop, _Inbox] = {}
        self._closed = False

    @property
    def threads(self) -> int:
        return len(self._threads)

    def run(self, fn: Callable[[], Any]) -> asyncio.Future[Any]:
        """Schedule `fn()` on a worker; the returned future resolves on the calling loop."""
        if self._closed:
            raise RuntimeError("the dispatcher is shut down")
        loop = asyncio.get_running_loop()
        inbox = self._inboxes.get(loop)
        if inbox is None:
            # A new loop (an app restarted in tests, say): forget the loops that are gone.
            for old in [old for old in self._inboxes if old.is_closed()]:
                del self._inboxes[old]
            inbox = self._inboxes.setdefault(loop, _Inbox(loop))
        future = loop.create_future()
        with self._lock:
            spawn = self._idle == 0 and len(self._threads) < self._max
            if not spawn:
                self._idle -= 1
        self._calls.put((inbox, future, fn))
        if spawn:
            self._spawn()
        return future

    def _spawn(self) -> None:
        thread = threading.Thread(
            target=self._work, name=f"{self._name}-{len(self._threads)}", daemon=True
        )
        self._threads.append(thread)
        thread.start()

    def _work(self) -> None:
        calls = self._calls
        while True:
            item = calls.get()
            if item is _STOP:
                return
            inbox, future, fn = item
            try:
                result, error = fn(), None
            except BaseException as exc:
                result, error = None, exc
            inbox.results.append((future, error, result))
            with self._lock:
                self._idle += 1
                wake = not inbox.wakeup_pending
                inbox.wakeup_pending = True
            if wake and not inbox.loop.is_closed():
                try:
                    inbox.loop.call_soon_threadsafe(self._deliver, inbox)
                except RuntimeError:  # the loop closed meanwhile: nobody awaits the result
                    pass

    def _deliver(self, inbox: _Inbox) -> None:
        with self._lock:
            inbox.wakeup_pending = False
        results = inbox.results
        while results:
            future, error, result = results.popleft()
            if future.cancelled():
                continue
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)

    def shutdown(self) -> None:
        """Let the workers finish what they run and stop; calls still queued are dropped."""
        self._closed = True
        for _ in self._threads:
            self._calls.put(_STOP)
