"""Await an environment's async code in the caller's task, able to leave it behind.

A session's async call (`reset_async`, `step_async`, an MCP tool) must answer at its deadline
even if the environment's code ignores cancellation. Running it in a task of its own gives that,
at a price paid on every call: a task, a done callback and a wake-up of the caller, two passes
of the event loop later (about 7 µs of a served MCP step's 60 µs, in process). Most such calls
never wait for anything.

`run_inline` drives the coroutine itself, in the caller's task and in a copy of its context (as
a task would run it): a call that returns at once costs one `send`. A call that waits is
awaited as usual, its futures passed through to the caller's task, so a deadline (or the
caller going away) cancels it like any awaited coroutine. If it then goes on waiting instead
of returning (it ignored the cancellation, or cleans up), it is left behind: a task of its own
finishes it, and the caller gets its `CancelledError` at once.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

T = TypeVar("T")

logger = logging.getLogger("openenv.server")

#: Calls left behind and still running: a task is only weakly held by the loop.
_left_behind: set[asyncio.Task[Any]] = set()


async def run_inline(coro: Coroutine[Any, Any, T]) -> T:
    """`await coro`, in a context of its own, leaving it behind should it outlast a cancel."""
    context = contextvars.copy_context()
    try:
        yielded = context.run(coro.send, None)
    except StopIteration as stop:
        return stop.value
    result: T = await _Driven(coro, yielded, context)
    return result


class _Driven:
    """The rest of a coroutine that has yielded `yielded` once: awaiting this passes what it
    yields to the awaiting task and what the task sends (or throws) back to it, each step run in
    `context`. With `leave_behind`, a cancellation it outlasts leaves it to a task of its own."""

    __slots__ = ("_context", "_coro", "_leave_behind", "_yielded")

    def __init__(
        self,
        coro: Coroutine[Any, Any, Any],
        yielded: Any,
        context: contextvars.Context,
        leave_behind: bool = True,
    ) -> None:
        self._coro = coro
        self._yielded = yielded
        self._context = context
        self._leave_behind = leave_behind

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, yielded, run = self._coro, self._yielded, self._context.run
        self._yielded = None
        while True:
            try:
                sent = yield yielded
            except BaseException as exc:  # a cancellation, or an awaited future's exception
                try:
                    yielded = run(coro.throw, exc)
                except StopIteration as stop:
                    return stop.value  # (also after a cancellation: its result stands)
                if self._leave_behind and isinstance(exc, asyncio.CancelledError):
                    _leave_behind(coro, yielded, self._context)
                    raise
            else:
                try:
                    yielded = run(coro.send, sent)
                except StopIteration as stop:
                    return stop.value


def _leave_behind(
    coro: Coroutine[Any, Any, Any], yielded: Any, context: contextvars.Context
) -> None:
    """Let a coroutine that went on after its cancellation finish in a task of its own."""
    task = asyncio.get_running_loop().create_task(_finish(_Driven(coro, yielded, context, False)))
    _left_behind.add(task)
    task.add_done_callback(_left_behind.discard)


async def _finish(rest: _Driven) -> None:
    try:
        await rest
    except asyncio.CancelledError:
        pass
    except Exception:
        # Nobody awaits it any more: its failure is only worth a line in the log.
        logger.debug("An environment call left behind at its deadline failed", exc_info=True)
