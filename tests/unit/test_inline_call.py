"""`run_inline`: an environment's async call awaited in the caller's task, as a task would run
it (its own context), and left behind when it outlasts its cancellation."""

from __future__ import annotations

import asyncio
import contextvars

import anyio
import anyio.lowlevel
import pytest

from openenv.core.env_server import inline_call
from openenv.core.env_server.inline_call import run_inline

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="caller")


async def test_a_call_that_returns_at_once_makes_no_task() -> None:
    async def quick() -> str:
        VAR.set("callee")
        return "done"

    before = len(asyncio.all_tasks())
    assert await run_inline(quick()) == "done"
    assert len(asyncio.all_tasks()) == before
    assert VAR.get() == "caller"  # it ran in a context of its own, as in a task


async def test_a_call_that_waits_runs_in_the_callers_task() -> None:
    caller = asyncio.current_task()
    seen: list[object] = []

    async def waits() -> int:
        VAR.set("callee")
        seen.append(asyncio.current_task())
        with anyio.fail_after(60):  # a cancel scope spanning awaits stays in one task
            await asyncio.sleep(0)
            await anyio.lowlevel.checkpoint()
        seen.append(asyncio.current_task())
        assert VAR.get() == "callee"
        return 7

    assert await run_inline(waits()) == 7
    assert seen == [caller, caller]
    assert VAR.get() == "caller"


async def test_errors_reach_the_coroutine_and_the_caller() -> None:
    loop = asyncio.get_running_loop()

    async def fails_inside() -> str:
        fut: asyncio.Future[None] = loop.create_future()
        loop.call_soon(fut.set_exception, KeyError("from the future"))
        try:
            await fut
        except KeyError:
            return "handled"
        return "not raised"

    async def fails() -> None:
        await asyncio.sleep(0)
        raise ValueError("the environment failed")

    async def fails_at_once() -> None:
        raise LookupError("at once")

    assert await run_inline(fails_inside()) == "handled"
    with pytest.raises(ValueError, match="the environment failed"):
        await run_inline(fails())
    with pytest.raises(LookupError, match="at once"):
        await run_inline(fails_at_once())


async def test_a_cancelled_call_that_honours_it_is_not_left_behind() -> None:
    cleaned = asyncio.Event()

    async def honest() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            cleaned.set()

    task = asyncio.create_task(run_inline(honest()))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned.is_set()
    assert not inline_call._left_behind


async def test_a_call_that_outlasts_its_cancel_is_left_behind_and_finishes() -> None:
    finished = asyncio.Event()
    go_on = asyncio.Event()

    async def stubborn() -> str:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            await go_on.wait()  # ignores the cancel, for now
            VAR.set("left behind")
            finished.set()
        return "late"

    task = asyncio.create_task(run_inline(stubborn()))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task  # the caller is not held up
    assert len(inline_call._left_behind) == 1
    go_on.set()
    await asyncio.wait_for(finished.wait(), 60)
    await asyncio.sleep(0)
    assert not inline_call._left_behind
    assert VAR.get() == "caller"


async def test_a_call_that_swallows_its_cancel_and_returns_keeps_its_result() -> None:
    async def swallows() -> str:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            return "kept"
        return "slept"

    task = asyncio.create_task(run_inline(swallows()))
    await asyncio.sleep(0)
    task.cancel()
    assert await task == "kept"
