"""Sync environment calls on worker threads, at a fraction of `run_in_executor`'s cost.

`loop.run_in_executor` pays for a `concurrent.futures.Future`, a lock and a work item per
call, and a wake-up of the loop per result. Environment steps are often a few microseconds of
Python, so that overhead is most of a step. Two paths replace it:

- Under load (other calls of the loop in flight), a call is one tuple in the loop's batch. The
  calls made during one pass of the loop are handed to the pool in one go, at the start of the
  next pass: one lock and at most one worker wake-up per pass. One worker drains the backlog
  while it can. Before, each call counted as needing an idle worker of its own, so 64 sessions
  kept 64 threads taking the GIL in turn for one call each (and on Python 3.13, whose
  `SimpleQueue` hands each item to a parked thread, woke one per call). A worker woken on a
  busy core runs, finds the GIL held and sleeps again. Workers take the GIL when the loop lets
  go of it, and one loop wake-up delivers every result that finished meanwhile.
- A backlog whose first call has not moved for `STALL_S` (the worker draining it is stuck in a
  blocking call) gets a worker for each of its calls, up to the limit: a slow call holds up the
  others for at most that long. For `BLOCKING_MODE_S` after such a stall, every call handed
  over gets a worker of its own at once (as before batching), so that an environment whose
  calls block (I/O, a sandbox) pays the stall once, not once per call. Threads start on
  demand, when no worker is parked.
- A call made while the loop has no other in flight (one session stepping in lock-step: the
  latency case) goes to the express worker, which sleeps on a file descriptor. Python releases
  the GIL around `os.write`, so the woken worker can take the GIL at once, and often runs the
  call before the loop's write has even returned; the result is then set without another pass
  of the loop. A lock or `call_soon_threadsafe` would wake the thread while the waker still
  holds the GIL: on a busy core the woken thread runs, finds the GIL taken and sleeps again.
  On this path a hop costs about 6 µs instead of 18 µs.

A call can be given up (`abandon`, used when it passes its server-side deadline). A Python
thread cannot be killed, so the thread running it is abandoned instead: it no longer counts
against the pool, which may start a replacement, and it exits (after running the `then` hook,
e.g. the environment's `close`) whenever the call returns. At most `max_abandoned` threads are
abandoned at once; past that, a hung thread keeps its place in the pool. A call given up while
still queued is skipped. Every worker is a daemon thread, so hung calls never delay exit.

A burst of blocking calls can start many pool threads; each holds a stack and a place in every
GIL hand-over. A pool thread left idle for `idle_timeout` seconds (while another worker is idle
too, or no call waits) exits, so the pool shrinks back after the burst. The express worker and
a one-thread pool (whose calls must all run on the same thread) keep their thread.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from queue import Empty, SimpleQueue
from typing import Any, Optional

logger = logging.getLogger("openenv.server")
_STOP = object()
#: Abandoned (hung) threads allowed besides the pool, at least: past that, a hung call keeps
#: its thread's place in the pool. Bounds the threads a stream of hung calls can pile up.
_MIN_ABANDONED = 64
#: A loop's calls take the express worker after this many in a row found no other call in
#: flight. Under load the count keeps dropping to 0 (a call that finds the in-flight count at
#: 0 between two batches of results is no sign of a quiet loop); a lone session passes it on
#: its first steps.
_LONE_CALLS_FOR_EXPRESS = 8
#: Seconds an idle pool thread waits for a call before it exits (`CallDispatcher.idle_timeout`).
DEFAULT_IDLE_TIMEOUT = 30.0
#: Seconds the oldest call of the backlog may wait before workers are woken for the backlog. Above
#: the GIL's switch interval (5 ms), so that a worker that merely waits for the GIL (the loop is
#: busy) does not count as stuck.
STALL_S = 0.01
#: Seconds after a stall during which each call handed over wakes a worker of its own.
BLOCKING_MODE_S = 10.0
_WAKE = None  # a token that sends a parked pool worker to drain the backlog
_Result = tuple[asyncio.Future[Any], Optional[BaseException], Any]


class _Wakeup:
    """A file descriptor to sleep on: an eventfd where there is one, else a pipe."""

    __slots__ = ("_read_size", "_token", "read_fd", "write_fd")

    def __init__(self, nonblocking: bool) -> None:
        eventfd = getattr(os, "eventfd", None)
        if eventfd is not None:
            flags = os.EFD_CLOEXEC | (os.EFD_NONBLOCK if nonblocking else 0)
            self.read_fd = self.write_fd = eventfd(0, flags)
            self._token = (1).to_bytes(8, sys.byteorder)
            self._read_size = 8
        else:
            self.read_fd, self.write_fd = os.pipe()
            os.set_blocking(self.read_fd, not nonblocking)
            self._token = b"\0"
            self._read_size = 4096

    def set(self) -> None:
        os.write(self.write_fd, self._token)

    def wait(self) -> None:
        """Block until set (blocking descriptor), or clear a pending set (non-blocking one)."""
        try:
            os.read(self.read_fd, self._read_size)
        except BlockingIOError:
            pass

    def close(self) -> None:
        os.close(self.read_fd)
        if self.write_fd != self.read_fd:
            os.close(self.write_fd)


class _Worker:
    """A pool thread and the call it runs (read by `abandon`, under the dispatcher's lock)."""

    __slots__ = ("abandoned", "future", "then", "thread")

    def __init__(self) -> None:
        self.future: Optional[asyncio.Future[Any]] = None
        self.abandoned = False
        #: Run on this thread once its current call returns (the caller gave up on it).
        self.then: Optional[Callable[[], Any]] = None
        self.thread: Optional[threading.Thread] = None


class _Express(_Worker):
    """The express worker: runs a loop's call when it is the only one in flight."""

    __slots__ = ("idle", "item", "wakeup")

    def __init__(self) -> None:
        super().__init__()
        self.wakeup = _Wakeup(nonblocking=False)
        self.item: Any = None
        self.idle = True


class _Inbox:
    """Results waiting for one event loop, delivered by one wake-up of that loop."""

    __slots__ = (
        "batch",
        "handing_over",
        "in_flight",
        "lone_calls",
        "loop",
        "results",
        "stall_armed",
        "stall_head",
        "wakeup",
        "wakeup_pending",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.results: deque[_Result] = deque()
        self.wakeup_pending = False
        #: Calls of this loop not yet delivered, and how many calls in a row found no other
        #: in flight; both only touched by the loop's thread.
        self.in_flight = 0
        self.lone_calls = 0
        #: Set while the loop's thread hands a call to the express worker (under the lock).
        self.handing_over = False
        #: None where the loop cannot watch a descriptor (e.g. the Windows proactor loop).
        self.wakeup: Optional[_Wakeup] = None
        #: Pool calls made during this pass of the loop, handed over at the next (loop thread).
        self.batch: list[Any] = []
        #: A stall check is scheduled on this loop; the backlog's first call when it was.
        self.stall_armed = False
        self.stall_head: Any = None

    def notify(self, deliver: Callable[[_Inbox], None], wakeup: Optional[_Wakeup]) -> None:
        """Wake the loop from a worker thread so that it runs `deliver(self)`.

        With `wakeup` (read under the dispatcher's lock) the write releases the GIL; without,
        `call_soon_threadsafe` wakes the loop and the worker keeps the GIL.
        """
        if self.loop.is_closed():
            return  # nobody awaits the results any more
        if wakeup is not None:
            wakeup.set()
            return
        try:
            self.loop.call_soon_threadsafe(deliver, self)
        except RuntimeError:  # the loop closed meanwhile
            pass


class CallDispatcher:
    """A small thread pool for sync calls made from event loops.

    Two ways to a worker thread:

    - The express worker takes a loop's call when no other call of that loop is in flight
      (one session stepping in lock-step, the latency case). It sleeps on a descriptor and
      hands results back through one, so each wake-up releases the GIL on the way (see the
      module docstring).
    - Everything else goes to the pool, one batch per pass of the loop. While the loop is
      busy, its calls queue up in the backlog, a worker drains it when the loop lets go of the
      GIL, and results come back in batches (the throughput case). More workers join only
      while the backlog is stuck behind blocking calls.
    """

    def __init__(
        self,
        max_threads: int,
        name: str = "openenv-env",
        max_abandoned: int | None = None,
        idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
    ) -> None:
        if max_threads < 1:
            raise ValueError("max_threads must be at least 1")
        if idle_timeout is not None and idle_timeout <= 0:
            raise ValueError("idle_timeout must be positive (None: threads never retire)")
        #: Threads given up on (hung calls) that no longer count against the pool.
        self.max_abandoned = (
            max(_MIN_ABANDONED, max_threads) if max_abandoned is None else max_abandoned
        )
        self.abandoned = 0
        #: Futures given up on before a worker took them: skipped, not run.
        self._skip: set[asyncio.Future[Any]] = set()
        # With one thread allowed, every call must run on the same thread: no express worker.
        self._express_allowed = max_threads > 1
        self._max = max_threads - 1 if self._express_allowed else max_threads
        #: Seconds an idle pool thread waits before it exits; None (and a one-thread pool,
        #: whose calls must stay on one thread) keeps threads for good.
        self.idle_timeout = idle_timeout if self._express_allowed else None
        #: Pool threads that exited idle, for metrics and tests.
        self.retired = 0
        self._name = name
        #: Calls handed over and not yet taken by a worker (any loop's).
        self._backlog: deque[Any] = deque()
        #: Wake-up tokens (and stops) for parked pool workers.
        self._tokens: SimpleQueue[Any] = SimpleQueue()
        self._threads: list[_Worker] = []
        #: Pool threads draining the backlog (or woken to), and parked ones no token is
        #: meant for; both under the lock.
        self._draining = 0
        self._parked = 0
        #: Until when (monotonic) each call handed over gets its own worker; stalls seen.
        self._blocking_until = 0.0
        self.stalls = 0
        self._lock = threading.Lock()
        self._inboxes: dict[asyncio.AbstractEventLoop, _Inbox] = {}
        self._express: Optional[_Express] = None
        self._closed = False
        #: Every descriptor made; closed by the finalizer (workers and loops hold `self`).
        self._wakeups: list[_Wakeup] = []
        weakref.finalize(self, _close_all, self._wakeups)

    @property
    def threads(self) -> int:
        return len(self._threads) + (self._express is not None)

    def run(self, fn: Callable[[], Any]) -> asyncio.Future[Any]:
        """Schedule `fn()` on a worker; the returned future resolves on the calling loop."""
        if self._closed:
            raise RuntimeError("the dispatcher is shut down")
        loop = asyncio.get_running_loop()
        inbox = self._inboxes.get(loop)
        if inbox is None:
            inbox = self._open_inbox(loop)
        future = loop.create_future()
        item = (inbox, future, fn)
        inbox.in_flight += 1
        if inbox.in_flight > 1:
            inbox.lone_calls = 0
        else:
            inbox.lone_calls += 1
            if (
                inbox.lone_calls > _LONE_CALLS_FOR_EXPRESS
                and self._express_allowed
                and self._run_express(inbox, item)
            ):
                return future
        batch = inbox.batch
        batch.append(item)
        if len(batch) == 1:
            loop.call_soon(self._hand_over, inbox)
        return future

    def _hand_over(self, inbox: _Inbox) -> None:
        """Give the pool the calls of the last pass of the loop (loop thread)."""
        batch, inbox.batch = inbox.batch, []
        if not batch:
            return  # shutdown took them
        with self._lock:
            self._backlog.extend(batch)
            if self._blocking_until and time.monotonic() < self._blocking_until:
                starting = self._wake_many_locked(len(batch))
            elif self._draining == 0:
                starting = self._wake_many_locked(1)
            else:
                starting = []
        for worker in starting:
            self._start(worker)
        if not inbox.stall_armed:
            self._arm_stall_check(inbox)

    def _wake_many_locked(self, count: int) -> list[_Worker]:
        """Up to `count` more workers (under the lock); the new ones, to start outside it."""
        starting = []
        for _ in range(count):
            if self._parked <= 0 and len(self._threads) >= self._max:
                break
            worker = self._wake_locked()
            if worker is not None:
                starting.append(worker)
        return starting

    def _wake_locked(self) -> Optional[_Worker]:
        """One more pool worker for the backlog (under the lock): a token for a parked one, or
        a new worker (returned, to start outside the lock), if the pool may grow."""
        if self._parked > 0:
            self._parked -= 1
            self._draining += 1
            self._tokens.put(_WAKE)
            return None
        if len(self._threads) >= self._max:
            return None
        self._draining += 1
        worker = _Worker()
        worker.thread = threading.Thread(
            target=self._work,
            args=(worker,),
            name=f"{self._name}-{len(self._threads) + self.abandoned}",
            daemon=True,
        )
        self._threads.append(worker)
        return worker

    def _arm_stall_check(self, inbox: _Inbox) -> None:
        try:
            inbox.stall_head = self._backlog[0]
        except IndexError:
            return  # already taken
        inbox.stall_armed = True
        inbox.loop.call_later(STALL_S, self._check_stall, inbox)

    def _check_stall(self, inbox: _Inbox) -> None:
        """Wake one more worker if the backlog's first call has waited since the last check."""
        inbox.stall_armed = False
        head, inbox.stall_head = inbox.stall_head, None
        starting: list[_Worker] = []
        with self._lock:
            backlog = self._backlog
            if backlog and backlog[0] is head and not self._closed:
                self.stalls += 1
                self._blocking_until = time.monotonic() + BLOCKING_MODE_S
                starting = self._wake_many_locked(len(backlog))
        for worker in starting:
            self._start(worker)
        if self._backlog:
            self._arm_stall_check(inbox)

    def _run_express(self, inbox: _Inbox, item: Any) -> bool:
        express = self._express
        if express is None:
            express = self._express = _Express()
            self._wakeups.append(express.wakeup)
            express.thread = threading.Thread(
                target=self._express_work,
                args=(express,),
                name=f"{self._name}-x{self.abandoned or ''}",
                daemon=True,
            )
            express.thread.start()
        with self._lock:
            if not express.idle:
                return False
            express.idle = False
        express.item = item
        express.future = item[1]
        # The write releases the GIL, so the worker often runs the call before the write
        # returns. It then leaves the result without waking the loop, the result is set here
        # and the caller's await does not suspend.
        inbox.handing_over = True
        express.wakeup.set()
        with self._lock:
            inbox.handing_over = False
            ready = bool(inbox.results)
        if ready:
            self._set_results(inbox)
        return True

    def _open_inbox(self, loop: asyncio.AbstractEventLoop) -> _Inbox:
        # A new loop (an app restarted in tests, say): forget the loops that are gone.
        for old in [old for old in self._inboxes if old.is_closed()]:
            del self._inboxes[old]
        inbox = _Inbox(loop)
        wakeup = _Wakeup(nonblocking=True)
        self._wakeups.append(wakeup)
        try:
            loop.add_reader(wakeup.read_fd, self._deliver, inbox)
        except NotImplementedError:
            pass
        else:
            inbox.wakeup = wakeup
        self._inboxes[loop] = inbox
        return inbox

    def _start(self, worker: _Worker) -> None:
        """Start the thread of a worker `_wake_locked` added (it begins by draining)."""
        assert worker.thread is not None
        worker.thread.start()

    def _work(self, worker: _Worker) -> None:
        tokens = self._tokens
        idle_timeout = self.idle_timeout
        while True:
            if not self._drain(worker):
                return  # abandoned
            while True:
                try:
                    token = tokens.get(timeout=idle_timeout)
                except Empty:
                    if self._retire(worker):
                        return
                    continue
                break
            if token is _STOP:
                return

    def _drain(self, worker: _Worker) -> bool:
        """Run backlog calls until there are none; False if this worker was abandoned."""
        backlog = self._backlog
        while True:
            try:
                inbox, future, fn = backlog.popleft()
            except IndexError:
                with self._lock:
                    if backlog:
                        continue  # handed over just now
                    self._draining -= 1
                    self._parked += 1
                return True
            worker.future = future
            if self._skip and self._skipped(future):
                result: _Result = (future, None, None)
            else:
                result = _call(future, fn)
            with self._lock:
                worker.future = None
                then, worker.then = worker.then, None
                if worker.abandoned:  # nobody waits for this result any more
                    wake = False
                else:
                    inbox.results.append(result)
                    wake = not inbox.wakeup_pending
                    inbox.wakeup_pending = True
            if wake:
                inbox.notify(self._deliver, None)
            if then is not None:
                _run_hook(then)
            if worker.abandoned:
                with self._lock:
                    self.abandoned -= 1
                return False

    def _retire(self, worker: _Worker) -> bool:
        """Leave the pool after an idle wait, unless a wake-up token is meant for this thread.

        `_parked` counts parked workers no token was put for: while it is above 0, one parked
        worker is spare.
        """
        with self._lock:
            if self._parked <= 0 or self._closed:
                return False
            self._parked -= 1
            self._threads.remove(worker)
            self.retired += 1
        return True

    def _skipped(self, future: asyncio.Future[Any]) -> bool:
        with self._lock:
            if future in self._skip:
                self._skip.discard(future)
                return True
        return False

    def abandon(
        self, future: asyncio.Future[Any], then: Optional[Callable[[], Any]] = None
    ) -> bool:
        """Give up on the call of `future` (call from its loop); True if a thread runs it.

        The running thread leaves the pool (a replacement may start, up to `max_abandoned`
        abandoned threads) and runs `then` once the call returns. A call still queued is
        skipped and `then` is not run (False). The caller settles `future` itself.
        """
        starting: Optional[_Worker] = None
        with self._lock:
            self._skip.add(future)
            worker: Optional[_Worker] = None
            express = self._express
            if express is not None and not express.idle and express.future is future:
                worker = express
            else:
                worker = next((w for w in self._threads if w.future is future), None)
            if worker is not None:
                self._skip.discard(future)
                worker.then = then
                if self.abandoned < self.max_abandoned:
                    worker.abandoned = True
                    self.abandoned += 1
                    inbox = self._inboxes.get(asyncio.get_running_loop())
                    if inbox is not None:  # its result will never be delivered
                        inbox.in_flight -= 1
                    if worker is express:
                        self._express = None  # the next lone call starts a new express worker
                    else:
                        self._threads.remove(worker)
                        self._draining -= 1
                        if self._backlog and self._draining == 0 and not self._closed:
                            starting = self._wake_locked()  # calls wait: a replacement now
        if worker is None:
            return False
        if not worker.abandoned:
            logger.error(
                "%d threads already hang in abandoned calls: this one keeps its place in the "
                "pool until its call returns",
                self.abandoned,
            )
        if starting is not None:
            self._start(starting)
        return True

    def _express_work(self, express: _Express) -> None:
        while True:
            express.wakeup.wait()
            item, express.item = express.item, None
            if item is _STOP:
                return
            inbox, future, fn = item
            if self._skip and self._skipped(future):
                result: _Result = (future, None, None)
            else:
                result = _call(future, fn)
            with self._lock:
                if not express.abandoned:
                    inbox.results.append(result)
                wake = not inbox.wakeup_pending and not inbox.handing_over and not express.abandoned
                inbox.wakeup_pending = wake or inbox.wakeup_pending
                wakeup = inbox.wakeup
                stop = self._closed or express.abandoned
                then, express.then = express.then, None
                # Idle before the loop hears of the result, so that its next call finds us.
                express.idle = not stop
            if wake:
                inbox.notify(self._deliver, wakeup)
            if then is not None:
                _run_hook(then)
            if stop:
                if express.abandoned:
                    with self._lock:
                        self.abandoned -= 1
                return

    def _deliver(self, inbox: _Inbox) -> None:
        if inbox.wakeup is not None:
            inbox.wakeup.wait()
        self._set_results(inbox)

    def _set_results(self, inbox: _Inbox) -> None:
        with self._lock:
            inbox.wakeup_pending = False
        results = inbox.results
        while results:
            future, error, result = results.popleft()
            inbox.in_flight -= 1
            if future.done():  # given up on (cancelled or settled by its deadline)
                continue
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)

    def shutdown(self) -> None:
        """Refuse new calls; workers finish the calls already queued, then stop.

        The descriptors are closed when the dispatcher is garbage: by then no worker thread
        and no loop can use them.
        """
        with self._lock:
            self._closed = True  # no pool thread retires from here on: each takes a _STOP
            for inbox in self._inboxes.values():  # calls not handed over yet still run
                batch, inbox.batch = inbox.batch, []
                self._backlog.extend(batch)
            starting = self._wake_locked() if self._backlog and self._draining == 0 else None
            running_threads = len(self._threads)
        if starting is not None:
            self._start(starting)
        for _ in range(running_threads):
            self._tokens.put(_STOP)
        express = self._express
        if express is not None:
            with self._lock:
                stop_now, express.idle = express.idle, False
            if stop_now:
                express.item = _STOP
                express.wakeup.set()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        for inbox in self._inboxes.values():
            with self._lock:  # from here on, workers wake this loop with call_soon_threadsafe
                wakeup, inbox.wakeup = inbox.wakeup, None
            if wakeup is None or inbox.loop.is_closed():
                continue
            if inbox.loop is running:
                self._stop_watching(inbox, wakeup)
            else:
                inbox.loop.call_soon_threadsafe(self._stop_watching, inbox, wakeup)

    def _stop_watching(self, inbox: _Inbox, wakeup: _Wakeup) -> None:
        inbox.loop.remove_reader(wakeup.read_fd)
        if inbox.results:  # a worker may have written to the descriptor just before
            self._set_results(inbox)


def _call(future: asyncio.Future[Any], fn: Callable[[], Any]) -> _Result:
    try:
        return future, None, fn()
    except BaseException as exc:
        return future, exc, None


def _run_hook(then: Callable[[], Any]) -> None:
    try:
        then()
    except BaseException:
        logger.exception("Clean-up after an abandoned call failed")


def _close_all(wakeups: list[_Wakeup]) -> None:
    for wakeup in wakeups:
        wakeup.close()
    wakeups.clear()
