"""The replay store on its own: stored outcomes, duplicates of a running request, the limits."""

from __future__ import annotations

import asyncio

import pytest

from openenv.core.env_server.replay_store import ReplayStore, outcome_size
from openenv.core.errors import InvalidRequestError, ReplyEvictedError, ServerError
from openenv.core.protocol import EncodedReply


def _reply(n: int, size: int = 10) -> EncodedReply:
    return EncodedReply("observation", b'{"n":%d,"pad":"%s"}' % (n, b"x" * size))


async def test_a_request_is_run_once_and_its_reply_kept() -> None:
    store = ReplayStore(window=8, budget=1 << 20)
    assert store.begin(1)
    store.finish(1, _reply(1))
    assert not store.begin(1)
    assert await store.outcome(1) == _reply(1)
    assert store.size == outcome_size(_reply(1))


async def test_an_error_is_kept_as_its_code_and_message() -> None:
    store = ReplayStore(window=8, budget=1 << 20)
    assert store.begin("a")
    store.finish("a", InvalidRequestError("bad action"))
    assert not store.begin("a")
    with pytest.raises(ServerError) as first:
        await store.outcome("a")
    with pytest.raises(ServerError) as second:
        await store.outcome("a")
    assert first.value is not second.value  # a fresh copy each time
    assert first.value.code == InvalidRequestError("x").code
    assert "bad action" in first.value.message


async def test_a_duplicate_waits_for_the_request_running() -> None:
    store = ReplayStore(window=8, budget=1 << 20)
    assert store.begin(7)
    assert not store.begin(7)
    waiting = asyncio.ensure_future(store.outcome(7))
    await asyncio.sleep(0)
    assert not waiting.done()
    store.finish(7, _reply(7))
    assert await waiting == _reply(7)


async def test_a_cancelled_request_stores_nothing_and_its_duplicate_gives_up() -> None:
    store = ReplayStore(window=8, budget=1 << 20)
    assert store.begin(1)
    waiting = asyncio.ensure_future(store.outcome(1))
    await asyncio.sleep(0)
    store.finish(1, asyncio.CancelledError())
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert store.begin(1)  # not applied: it may run again


async def test_cancel_waiters_when_the_session_ends() -> None:
    store = ReplayStore(window=8, budget=1 << 20)
    assert store.begin(1)
    waiting = asyncio.ensure_future(store.outcome(1))
    await asyncio.sleep(0)
    store.cancel_waiters()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    store.finish(1, _reply(1))  # the request running still ends normally
    assert await store.outcome(1) == _reply(1)


async def test_budget_drops_old_replies_but_keeps_their_ids() -> None:
    one = outcome_size(_reply(1, 100))
    store = ReplayStore(window=8, budget=2 * one)

    class Gauge:
        value = 0

        def inc(self, n: int) -> None:
            self.value += n

    store.gauge = gauge = Gauge()
    for n in range(1, 4):
        assert store.begin(n)
        store.finish(n, _reply(n, 100))
    assert store.size == 2 * one == gauge.value
    assert not store.begin(1)
    with pytest.raises(ReplyEvictedError):
        await store.outcome(1)
    assert await store.outcome(3) == _reply(3, 100)


async def test_the_newest_reply_is_kept_even_over_budget() -> None:
    store = ReplayStore(window=8, budget=10)
    assert store.begin(1)
    store.finish(1, _reply(1, 1000))
    assert await store.outcome(1) == _reply(1, 1000)


async def test_window_forgets_the_oldest_ids() -> None:
    store = ReplayStore(window=2, budget=1 << 20)
    for n in range(1, 4):
        assert store.begin(n)
        store.finish(n, _reply(n))
    assert list(store.replies) == [2, 3]
    assert store.size == 2 * outcome_size(_reply(2))
    assert store.begin(1)  # forgotten: a request with that id is new again


def test_the_split_keeps_names_importable_from_sessions() -> None:
    from openenv.core.env_server import sessions

    for name in (
        "CLOSE_IDLE_TIMEOUT",
        "CLOSE_TAKEN_OVER",
        "RESTART_REASON",
        "Outcome",
        "Session",
        "SessionManager",
        "SlotPool",
        "factory_class",
        "factory_name",
        "filter_kwargs",
    ):
        assert hasattr(sessions, name), name
