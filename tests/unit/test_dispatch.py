"""CallDispatcher: sync calls off the event loop, results back on the caller's loop."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest

from openenv.core.env_server import dispatch
from openenv.core.env_server.dispatch import CallDispatcher


async def test_calls_run_off_the_loop_and_return_their_results() -> None:
    dispatcher = CallDispatcher(4)
    loop_thread = threading.get_ident()
    results = await asyncio.gather(
        *(dispatcher.run(lambda i=i: (i * i, threading.get_ident())) for i in range(20))
    )
    assert [value for value, _ in results] == [i * i for i in range(20)]
    assert all(thread != loop_thread for _, thread in results)
    dispatcher.shutdown()


async def test_exceptions_reach_the_awaiting_caller() -> None:
    dispatcher = CallDispatcher(2)

    def boom() -> None:
        raise ValueError("from the environment")

    with pytest.raises(ValueError, match="from the environment"):
        await dispatcher.run(boom)
    assert await dispatcher.run(lambda: "still serving") == "still serving"
    dispatcher.shutdown()


async def test_the_loop_keeps_running_while_a_call_blocks() -> None:
    dispatcher = CallDispatcher(2)
    release = threading.Event()
    blocked = dispatcher.run(lambda: release.wait(5))
    ticks = 0
    for _ in range(5):
        await asyncio.sleep(0.01)
        ticks += 1
    assert ticks == 5 and not blocked.done()
    release.set()
    assert await blocked is True
    dispatcher.shutdown()


async def test_threads_start_on_demand_up_to_the_limit() -> None:
    dispatcher = CallDispatcher(3)
    for _ in range(50):
        await dispatcher.run(lambda: None)
    # Sequential calls reuse one idle pool worker, then the express worker takes over.
    assert dispatcher.threads == 2
    barrier = threading.Barrier(3, timeout=5)
    await asyncio.gather(*(dispatcher.run(barrier.wait) for _ in range(3)))
    assert dispatcher.threads == 3
    await asyncio.gather(*(dispatcher.run(lambda: time.sleep(0.001)) for _ in range(30)))
    assert dispatcher.threads == 3
    dispatcher.shutdown()


async def test_one_thread_runs_calls_in_submission_order() -> None:
    dispatcher = CallDispatcher(1)
    seen: list[int] = []
    threads: set[int] = set()

    def record(i: int) -> None:
        seen.append(i)
        threads.add(threading.get_ident())

    await asyncio.gather(*(dispatcher.run(lambda i=i: record(i)) for i in range(100)))
    assert seen == list(range(100))
    assert len(threads) == 1
    dispatcher.shutdown()


def test_serves_several_event_loops() -> None:
    dispatcher = CallDispatcher(2)
    for _ in range(3):  # e.g. an app started and stopped by several test clients
        assert asyncio.run(_one_call(dispatcher)) == 42
    assert len(dispatcher._inboxes) == 1  # closed loops are not kept alive
    dispatcher.shutdown()


async def _one_call(dispatcher: CallDispatcher) -> int:
    return await dispatcher.run(lambda: 42)


async def test_a_cancelled_caller_does_not_break_delivery() -> None:
    dispatcher = CallDispatcher(1)
    release = threading.Event()
    slow = dispatcher.run(lambda: release.wait(5))
    slow.cancel()
    release.set()
    assert await dispatcher.run(lambda: "next") == "next"
    dispatcher.shutdown()


async def test_shutdown_refuses_new_calls() -> None:
    dispatcher = CallDispatcher(1)
    await dispatcher.run(lambda: None)
    dispatcher.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        dispatcher.run(lambda: None)


async def _warm_up(dispatcher: CallDispatcher) -> None:
    """Enough lone sequential calls for the express worker to take over."""
    for _ in range(20):
        await dispatcher.run(lambda: None)


async def test_lone_sequential_calls_take_the_express_worker() -> None:
    dispatcher = CallDispatcher(4)
    await _warm_up(dispatcher)
    loop_thread = threading.get_ident()
    seen = [await dispatcher.run(lambda i=i: (i, threading.current_thread())) for i in range(50)]
    assert [i for i, _ in seen] == list(range(50))
    threads = {thread for _, thread in seen}
    assert len(threads) == 1
    (thread,) = threads
    assert thread.name.endswith("-x") and thread.ident != loop_thread
    with pytest.raises(KeyError, match="express"):
        await dispatcher.run(lambda: {}["express"])
    assert await dispatcher.run(lambda: "after the error") == "after the error"
    dispatcher.shutdown()
    thread.join(5)
    assert not thread.is_alive()


async def test_a_blocked_express_call_does_not_hold_up_other_calls() -> None:
    dispatcher = CallDispatcher(4)
    await _warm_up(dispatcher)
    release = threading.Event()
    blocked = dispatcher.run(lambda: (release.wait(5), threading.current_thread().name))
    # The express worker is busy: this call must go to the pool and finish first.
    name = await asyncio.wait_for(dispatcher.run(lambda: threading.current_thread().name), 2)
    assert not name.endswith("-x") and not blocked.done()
    release.set()
    released, express_name = await blocked
    assert released is True and express_name.endswith("-x")
    dispatcher.shutdown()


async def test_a_cancelled_express_call_does_not_break_delivery() -> None:
    dispatcher = CallDispatcher(2)
    await _warm_up(dispatcher)
    release = threading.Event()
    slow = dispatcher.run(lambda: release.wait(5))
    slow.cancel()
    release.set()
    for i in range(20):
        assert await dispatcher.run(lambda i=i: i) == i
    dispatcher.shutdown()


async def test_one_thread_allowed_means_every_call_on_one_thread() -> None:
    """REQUIRES_SINGLE_THREAD_EXECUTOR environments: no express worker beside the one thread."""
    dispatcher = CallDispatcher(1)
    names = {await dispatcher.run(lambda: threading.current_thread().name) for _ in range(50)}
    assert len(names) == 1 and dispatcher.threads == 1
    dispatcher.shutdown()


async def test_shutdown_stops_an_express_worker_that_is_inside_a_call() -> None:
    dispatcher = CallDispatcher(2)
    await _warm_up(dispatcher)
    release = threading.Event()
    running = dispatcher.run(lambda: (release.wait(5), threading.current_thread())[1])
    await asyncio.sleep(0.01)
    dispatcher.shutdown()
    release.set()
    thread = await running
    thread.join(5)
    assert not thread.is_alive()


async def test_pipes_stand_in_where_there_is_no_eventfd(monkeypatch: pytest.MonkeyPatch) -> None:
    """macOS has no eventfd: the wake-ups then go through pipes."""
    monkeypatch.delattr(os, "eventfd", raising=False)
    dispatcher = CallDispatcher(4)
    await _warm_up(dispatcher)
    names = [await dispatcher.run(lambda: threading.current_thread().name) for _ in range(20)]
    assert all(name.endswith("-x") for name in names)
    gathered = await asyncio.gather(*(dispatcher.run(lambda i=i: i) for i in range(50)))
    assert gathered == list(range(50))
    dispatcher.shutdown()


# -- one hand-over per pass of the loop ---------------------------------------------------------


async def test_a_burst_of_quick_calls_does_not_start_a_thread_per_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The calls of one pass go to the pool together; one worker drains them."""
    # A worker starved for STALL_S on a loaded machine would count as stuck: not here.
    monkeypatch.setattr(dispatch, "STALL_S", 600.0)
    dispatcher = CallDispatcher(16)
    for _ in range(5):
        results = await asyncio.gather(*(dispatcher.run(lambda i=i: i) for i in range(64)))
        assert results == list(range(64))
    # Before, each call found no idle worker and started one, up to the limit (15 pool
    # threads).
    assert dispatcher.threads == 1 and dispatcher.stalls == 0
    dispatcher.shutdown()


async def test_a_blocking_call_in_a_batch_does_not_hold_up_the_others() -> None:
    dispatcher = CallDispatcher(4)
    release = threading.Event()
    blocked = dispatcher.run(lambda: release.wait(30))
    quick = [dispatcher.run(lambda i=i: i) for i in range(10)]  # same pass: the same batch
    # The worker draining the batch is stuck in the first call: another one takes the rest.
    assert await asyncio.wait_for(asyncio.gather(*quick), 30) == list(range(10))
    assert not blocked.done()
    release.set()
    assert await blocked is True
    dispatcher.shutdown()


async def test_blocking_calls_of_one_batch_all_get_a_thread() -> None:
    dispatcher = CallDispatcher(9)  # 8 pool threads
    meeting = threading.Barrier(8, timeout=30)
    names = await asyncio.gather(
        *(
            dispatcher.run(lambda: (meeting.wait(), threading.current_thread().name)[1])
            for _ in range(8)
        )
    )
    assert len(set(names)) == 8
    dispatcher.shutdown()


async def test_after_a_stall_blocking_calls_get_their_threads_at_once() -> None:
    """An environment whose calls block pays the stall once, not once per call."""
    dispatcher = CallDispatcher(17)  # 16 pool threads
    for _ in range(2):
        meeting = threading.Barrier(16, timeout=30)
        names = await asyncio.gather(
            *(
                dispatcher.run(lambda m=meeting: (m.wait(), threading.current_thread().name)[1])
                for _ in range(16)
            )
        )
        assert len(set(names)) == 16
    # One thread per stall would have taken 15 stalls per round.
    assert 1 <= dispatcher.stalls < 8
    dispatcher.shutdown()


async def test_shutdown_runs_calls_not_handed_over_yet() -> None:
    dispatcher = CallDispatcher(4)
    first, second = dispatcher.run(lambda: "first"), dispatcher.run(lambda: "second")
    dispatcher.shutdown()  # before the loop's next pass hands them to the pool
    assert await asyncio.wait_for(asyncio.gather(first, second), 30) == ["first", "second"]


# -- giving up on hung calls (server-side deadlines) -------------------------------------------


async def _until(predicate: object, what: str) -> None:
    for _ in range(3000):  # a bound only a real hang reaches
        if predicate():  # type: ignore[operator]
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{what} did not happen")


async def test_an_abandoned_call_leaves_the_pool_and_a_replacement_serves_the_queue() -> None:
    dispatcher = CallDispatcher(2)  # one pool thread (and an express worker, not used here)
    release = threading.Event()
    hung_threads: list[threading.Thread] = []
    then_threads: list[threading.Thread] = []

    def hang() -> None:
        hung_threads.append(threading.current_thread())
        release.wait(30)

    hung = dispatcher.run(hang)
    await _until(lambda: hung_threads, "the hung call starting")
    queued = dispatcher.run(lambda: "served")  # the only pool thread is busy: it waits
    assert dispatcher.abandon(hung, lambda: then_threads.append(threading.current_thread()))
    hung.cancel()  # the caller settles the future it gave up on
    assert await asyncio.wait_for(queued, 30) == "served"
    assert dispatcher.abandoned == 1

    release.set()  # the hung call returns at last: its thread cleans up and leaves
    (thread,) = hung_threads
    await asyncio.to_thread(thread.join, 30)
    assert not thread.is_alive()
    assert then_threads == [thread]
    assert dispatcher.abandoned == 0
    assert await dispatcher.run(lambda: "still serving") == "still serving"
    dispatcher.shutdown()


async def test_an_abandoned_express_call_gets_a_new_express_worker() -> None:
    dispatcher = CallDispatcher(2)
    await _warm_up(dispatcher)
    release = threading.Event()
    started = threading.Event()

    def hang() -> threading.Thread:
        started.set()
        release.wait(30)
        return threading.current_thread()

    hung = dispatcher.run(hang)
    await asyncio.to_thread(started.wait, 30)
    assert dispatcher.abandon(hung)
    hung.cancel()
    await _warm_up(dispatcher)
    names = {await dispatcher.run(lambda: threading.current_thread().name) for _ in range(20)}
    assert names == {"openenv-env-x1"}, names  # the replacement express worker
    release.set()
    dispatcher.shutdown()


async def test_a_call_given_up_before_it_started_is_skipped() -> None:
    dispatcher = CallDispatcher(2)
    release = threading.Event()
    started = threading.Event()
    ran: list[str] = []
    blocker = dispatcher.run(lambda: (started.set(), release.wait(30)))
    await asyncio.to_thread(started.wait, 30)
    queued = dispatcher.run(lambda: ran.append("ran"))
    assert not dispatcher.abandon(queued)  # no thread runs it yet
    queued.cancel()
    release.set()
    await blocker
    assert await dispatcher.run(lambda: "after") == "after"
    assert ran == []
    dispatcher.shutdown()


async def test_abandoned_threads_are_bounded() -> None:
    dispatcher = CallDispatcher(2, max_abandoned=1)
    release = threading.Event()
    running: list[str] = []

    def hang(tag: str) -> None:
        running.append(tag)
        release.wait(30)

    first = dispatcher.run(lambda: hang("first"))
    await _until(lambda: "first" in running, "the first hung call starting")
    assert dispatcher.abandon(first)
    first.cancel()
    second = dispatcher.run(lambda: hang("second"))  # on the replacement thread
    await _until(lambda: "second" in running, "the second hung call starting")
    assert dispatcher.abandon(second)  # it runs on a thread, but past the bound
    second.cancel()
    assert dispatcher.abandoned == 1
    third = dispatcher.run(lambda: "third")
    await asyncio.sleep(0.05)
    assert not third.done()  # the second hung thread kept its place: nothing replaced it
    release.set()
    assert await asyncio.wait_for(third, 30) == "third"
    dispatcher.shutdown()


async def test_idle_pool_threads_retire_after_a_burst_and_the_pool_grows_again() -> None:
    dispatcher = CallDispatcher(16, idle_timeout=0.05)
    burst = threading.Barrier(8, timeout=30)
    pool = await asyncio.gather(
        *(dispatcher.run(lambda: (burst.wait(), threading.current_thread())[1]) for _ in range(8))
    )
    assert len(set(pool)) == 8
    await _until(lambda: dispatcher.threads == 0, "idle pool threads retiring")
    await _until(lambda: not any(t.is_alive() for t in pool), "retired threads exiting")
    assert dispatcher.retired == 8
    # A new burst starts threads again, and every call still gets its own result.
    again = threading.Barrier(4, timeout=30)
    results = await asyncio.gather(
        *(dispatcher.run(lambda i=i: (again.wait(), i)[1]) for i in range(4))
    )
    assert results == [0, 1, 2, 3]
    dispatcher.shutdown()


async def test_a_one_thread_pool_never_retires_its_thread() -> None:
    # REQUIRES_SINGLE_THREAD_EXECUTOR environments: every call on the same thread, always.
    single = CallDispatcher(1, idle_timeout=0.05)
    first = await single.run(threading.get_ident)
    await asyncio.sleep(0.2)
    assert await single.run(threading.get_ident) == first
    assert single.retired == 0 and single.idle_timeout is None
    single.shutdown()


async def test_shutdown_stops_idle_threads_whether_or_not_they_would_retire() -> None:
    dispatcher = CallDispatcher(8, idle_timeout=0.05)
    barrier = threading.Barrier(4, timeout=30)
    pool = await asyncio.gather(
        *(dispatcher.run(lambda: (barrier.wait(), threading.current_thread())[1]) for _ in range(4))
    )
    assert len(set(pool)) == 4
    dispatcher.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        dispatcher.run(lambda: None)
    await _until(lambda: not any(t.is_alive() for t in pool), "every pool thread stopping")
    assert dispatcher.retired + dispatcher.threads == 4  # each either retired or took a stop


def test_idle_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="idle_timeout"):
        CallDispatcher(4, idle_timeout=0)
