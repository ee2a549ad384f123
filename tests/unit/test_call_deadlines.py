"""Tool-call time limits on one timer per loop (call_deadlines.py) behave as `asyncio.timeout`."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest

if sys.version_info < (3, 11):  # pragma: no cover
    pytest.skip("shared deadlines need Task.uncancel (Python 3.11+)", allow_module_level=True)

from openenv.core.env_server.call_deadlines import _per_loop, start_deadline


async def limited(limit: float, work: Any) -> Any:
    """`work` awaited under a shared deadline, as `MCPEnvironment.call_tool_raw` does."""
    deadline = start_deadline(limit)
    try:
        result = await work
    except BaseException as exc:
        deadline.finish(exc)
        raise
    deadline.finish()
    return result


def owner() -> Any:
    return _per_loop[asyncio.get_running_loop()]


async def test_a_call_past_its_limit_raises_timeout_error_and_others_go_on() -> None:
    async def finishes(value: str) -> str:
        await asyncio.sleep(0.01)
        return value

    slow = asyncio.ensure_future(limited(0.05, asyncio.sleep(10)))
    fast = [asyncio.ensure_future(limited(30, finishes(str(i)))) for i in range(5)]
    with pytest.raises(TimeoutError):
        await slow
    assert [await f for f in fast] == [str(i) for i in range(5)]
    assert not owner().by_limit  # every finished deadline is gone


async def test_a_shorter_limit_after_longer_ones_rearms_the_timer_earlier() -> None:
    long_calls = [asyncio.ensure_future(limited(30, asyncio.sleep(10))) for _ in range(3)]
    await asyncio.sleep(0)
    armed_at = owner().timer_at
    with pytest.raises(TimeoutError):
        await limited(0.02, asyncio.sleep(10))
    assert owner().timer_at == armed_at  # back on the long calls' head
    for call in long_calls:
        call.cancel()
    await asyncio.gather(*long_calls, return_exceptions=True)
    assert not owner().by_limit


async def test_deadlines_of_one_limit_expire_in_the_order_set() -> None:
    expired: list[int] = []

    async def one(i: int) -> None:
        try:
            await limited(0.03, asyncio.sleep(10))
        except TimeoutError:
            expired.append(i)

    calls = []
    for i in range(4):
        calls.append(asyncio.ensure_future(one(i)))
        await asyncio.sleep(0.005)
    await asyncio.gather(*calls)
    assert expired == [0, 1, 2, 3]


async def test_a_cancellation_from_elsewhere_stays_a_cancellation() -> None:
    call = asyncio.ensure_future(limited(30, asyncio.sleep(10)))
    await asyncio.sleep(0.01)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert not owner().by_limit


async def test_a_call_that_swallows_the_cancel_keeps_its_result_and_is_uncancelled() -> None:
    async def stubborn() -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            return "kept"
        return "slept"

    async def run() -> tuple[str, int]:
        value = await limited(0.02, stubborn())
        task = asyncio.current_task()
        assert task is not None
        return value, task.cancelling()

    assert await asyncio.ensure_future(run()) == ("kept", 0)


async def test_errors_of_the_call_pass_through_and_free_the_deadline() -> None:
    async def fails() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await limited(30, fails())
    assert not owner().by_limit
