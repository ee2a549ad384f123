"""Deadlines of sessions' environment calls, and what happens to a call that passes its own.

Every environment call of a session has a server-side deadline (`ServerConfig.timeout_for`).
`SessionManager.call` brackets a call with `begin` and `end`; one task for all calls (no timer
per call) wakes every tick and expires those past their deadline: the call gets a TIMEOUT error
at once, a sync call's thread is abandoned to the dispatcher (which closes the environment if
the call ever returns), an async call is cancelled (and left behind, should it not stop). The
manager then ends the session; the watchdog remembers the latest sessions ended so, so that a
later call learns why.

(Tool calls inside an MCP environment have their own, finer limits: call_deadlines.py.)
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import CallTimeoutError, ServerError, SessionExpiredError, SessionLostError
from .dispatch import CallDispatcher

if TYPE_CHECKING:
    from .sessions import Session

logger = logging.getLogger("openenv.server")

T = TypeVar("T")
#: Ids of sessions ended by a hung call, remembered so that a later call learns why.
ENDED_REMEMBERED = 1024
#: The call kinds that have a deadline of their own.
CALL_KINDS = ("reset", "step", "state", "call")


class CallWatchdog:
    """Tracks the calls running and expires those past their deadline."""

    def __init__(self, timeouts: dict[str, float | None], dispatcher: CallDispatcher) -> None:
        #: Call kind (`CALL_KINDS`) -> its deadline in seconds, None for none.
        self.timeouts = timeouts
        self.dispatcher = dispatcher
        #: Sessions with a call running (HTTP stateless ones included), for shutdown.
        self.running: set[Session] = set()
        #: session id -> (transport, why) of sessions a hung call ended, the latest ones.
        self.ended: OrderedDict[str, tuple[str, str]] = OrderedDict()
        self._task: asyncio.Task[None] | None = None
        self._all_done: asyncio.Event | None = None  # set when `running` empties (`settle`)

    # -- one call ---------------------------------------------------------------------------

    def begin(self, session: Session, kind: str) -> None:
        """A call of `kind` starts now on the current task (the session's lock held)."""
        timeouts = self.timeouts
        timeout = timeouts.get(kind, timeouts["call"])
        session.call_task = asyncio.current_task()
        if timeout is not None:
            session.deadline = (session.last_activity + timeout, kind, timeout)
            if self._task is None:
                self._start()
        self.running.add(session)

    def end(self, session: Session) -> None:
        """The call begun ended, however it ended."""
        running = self.running
        running.discard(session)
        session.call_task = session.waiter = session.deadline = None
        if self._all_done is not None and not running:
            self._all_done.set()

    async def detached(self, session: Session, work: Callable[[], Awaitable[T]]) -> T:
        """Run `work` in a task of its own; the caller stops waiting at the deadline."""
        loop = asyncio.get_running_loop()
        inner: asyncio.Task[T] = loop.create_task(work())  # type: ignore[arg-type]
        waiter: asyncio.Future[None] = loop.create_future()
        inner.add_done_callback(functools.partial(_wake, waiter))
        session.call_task, session.waiter = inner, waiter
        try:
            await waiter
        except asyncio.CancelledError:
            inner.cancel()  # the caller went away (its connection ended)
            raise
        if not inner.done():
            assert session.call_timed_out is not None
            raise session.call_timed_out
        return inner.result()

    def expire(self, session: Session, kind: str, timeout: float, why: str | None) -> None:
        """A call's deadline passed (or the server shuts down): give it up now."""
        task = session.call_task
        if task is None or session.call_timed_out is not None:
            return
        message = why or f"{kind}() did not return within its {timeout:g}s deadline"
        if session.id != "stateless":
            message += "; the session was ended (start a new one)"
        error = CallTimeoutError(message, method=kind, timeout_s=timeout)
        session.call_timed_out = error
        fut = session.pending
        if fut is not None and not fut.done():
            env = session.env
            # The abandoned thread closes the environment once (if ever) the call returns; a
            # close now would race the call still running in it.
            if self.dispatcher.abandon(fut, env.close if env is not None else None):
                session.env = None
            fut.set_exception(error)
            return
        task.cancel()  # async code is cancelled at its await
        waiter = session.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)  # ... and left behind, should it not stop

    # -- all calls --------------------------------------------------------------------------

    def expire_all(self, why: str) -> None:
        for session in list(self.running):
            self.expire(session, "call", 0, why)

    async def settle(self, timeout: float) -> None:
        """Wait up to `timeout` seconds for the calls running to end."""
        if self.running:
            self._all_done = asyncio.Event()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._all_done.wait(), timeout)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    def _start(self) -> None:
        timeouts = [t for t in self.timeouts.values() if t is not None]
        tick = max(0.02, min(1.0, min(timeouts) / 10)) if timeouts else 1.0
        self._task = asyncio.get_running_loop().create_task(self._watch(tick))

    async def _watch(self, tick: float) -> None:
        """Expire calls past their deadline (one task for all calls: no timer per call)."""
        while True:
            await asyncio.sleep(tick)
            if not self.running:
                continue
            now = time.monotonic()
            for session in list(self.running):
                deadline = session.deadline
                if deadline is not None and now >= deadline[0]:
                    try:
                        self.expire(session, deadline[1], deadline[2], None)
                    except Exception:
                        logger.exception("Ending a call past its deadline failed")

    # -- sessions ended by a hung call ------------------------------------------------------

    def remember_ended(self, session: Session, reason: str) -> None:
        ended = self.ended
        ended[session.id] = (session.transport, reason)
        while len(ended) > ENDED_REMEMBERED:
            ended.popitem(last=False)

    def ended_error(self, session_id: str, by: str | None) -> SessionExpiredError | None:
        """Why `session_id` is gone if a hung call ended it (and `by`, the transport asking,
        may know: a WebSocket session's end is told to WebSocket callers only)."""
        record = self.ended.get(session_id)
        if record is None:
            return None
        transport, reason = record
        if by is None or by == "ws" or transport != "ws":
            return timed_out_error(session_id, reason)
        return None

    @staticmethod
    def closed_error(session: Session) -> ServerError:
        """The error of a call on a session already ended."""
        if session.call_timed_out is not None:
            return timed_out_error(session.id, session.closed_reason or "")
        return SessionLostError(
            f"Session {session.id} is closed ({session.closed_reason or 'closed'})."
        )


def timed_out_error(session_id: str, reason: str) -> SessionExpiredError:
    """The error of a call on a session that a hung call ended."""
    return SessionExpiredError(
        f"Session {session_id} was ended by the server because a call hung: {reason}. "
        "Start a new session.",
        reason="call_timeout",
    )


def uncancel(task: asyncio.Task[Any] | None) -> None:
    """Undo our own `cancel()` of a task whose cancellation became a TIMEOUT (Python 3.11+)."""
    undo = getattr(task, "uncancel", None)
    cancelling = getattr(task, "cancelling", None)
    if undo is not None and cancelling is not None and cancelling():
        undo()


def _wake(waiter: asyncio.Future[None], task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved, also for a task left behind by its deadline
    if not waiter.done():
        waiter.set_result(None)
