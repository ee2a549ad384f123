"""Slot accounting, the wait queue, the reaper and ordered calls, without a network."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Optional

import pytest

from openenv.core.env_server import Action, Environment, Observation, ServerConfig, State
from openenv.core.env_server.errors import ConcurrencyConfigurationError
from openenv.core.env_server.sessions import SessionManager, SlotPool, filter_kwargs
from openenv.core.errors import CapacityReachedError, FactoryError


class Tick(Action):
    n: int = 1


class Recorder(Environment[Tick, Observation, State]):
    SUPPORTS_CONCURRENT_SESSIONS = True
    # The instances themselves, not their id(): a collected env's id is reused by a later one,
    # so an id list would count another test's env as this one.
    closed: list[Recorder] = []

    def __init__(self) -> None:
        super().__init__()
        self._state = State(step_count=0)

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None) -> Observation:
        self._state = State(episode_id=episode_id, step_count=0)
        return Observation(metadata={"seed": seed})

    def step(self, action: Tick, timeout_s: Optional[float] = None, **kwargs: Any) -> Observation:
        self._state.step_count += action.n
        return Observation(reward=self._state.step_count)

    @property
    def state(self) -> State:
        return self._state

    def close(self) -> None:
        Recorder.closed.append(self)


class Unsafe(Recorder):
    SUPPORTS_CONCURRENT_SESSIONS = False


async def test_slot_pool_is_fifo_and_bounded() -> None:
    pool = SlotPool(size=1, max_waiters=2)
    await pool.acquire(1.0)
    order: list[str] = []

    async def waiter(name: str) -> None:
        await pool.acquire(5.0)
        order.append(name)

    first = asyncio.create_task(waiter("first"))
    await asyncio.sleep(0)
    second = asyncio.create_task(waiter("second"))
    await asyncio.sleep(0)
    with pytest.raises(CapacityReachedError):  # the queue holds two
        await pool.acquire(5.0)
    pool.release()
    await first
    pool.release()
    await second
    assert order == ["first", "second"]
    assert pool.used == 1


async def test_slot_pool_wait_times_out_and_hands_slot_on() -> None:
    pool = SlotPool(size=1, max_waiters=4)
    await pool.acquire(1.0)
    with pytest.raises(CapacityReachedError) as info:
        await pool.acquire(0.05)
    assert info.value.data == {"active_sessions": 1, "max_sessions": 1}
    assert pool.queued == 0
    pool.release()
    assert pool.used == 0


async def test_cancelled_waiter_does_not_leak_a_slot() -> None:
    pool = SlotPool(size=1, max_waiters=4)
    await pool.acquire(1.0)
    task = asyncio.create_task(pool.acquire(5.0))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    pool.release()
    assert pool.used == 0
    await pool.acquire(0.1)
    assert pool.used == 1


async def test_destroy_frees_the_slot_exactly_once_and_closes_the_env() -> None:
    manager = SessionManager(Recorder, ServerConfig(max_concurrent_envs=2, session_timeout=None))
    session = await manager.create("http")
    env = session.env
    await manager.destroy(session)
    await manager.destroy(session)
    assert manager.slots.used == 0
    assert sum(closed is env for closed in Recorder.closed) == 1
    await manager.shutdown()


async def test_reaper_closes_idle_sessions_only() -> None:
    # A 2 s timeout (the reaper wakes every 0.5 s) and an idle session already 10 s idle: only a
    # stall of over 2 s between two touches could make the busy session look idle.
    manager = SessionManager(Recorder, ServerConfig(max_concurrent_envs=4, session_timeout=2.0))
    idle = await manager.create("http")
    busy = await manager.create("http")
    idle.last_activity -= 10
    deadline = time.monotonic() + 30
    while not idle.closed and time.monotonic() < deadline:  # the background reaper closes it
        await asyncio.sleep(0.02)
        busy.touch()
    assert idle.closed and not busy.closed
    assert idle.closed_reason and "idle" in idle.closed_reason
    assert manager.slots.used == 1
    await manager.shutdown()


async def test_calls_of_one_session_run_in_order() -> None:
    manager = SessionManager(Recorder, ServerConfig(max_concurrent_envs=1, session_timeout=None))
    session = await manager.create("http")
    await manager.reset(session, {"seed": 1, "unknown": True})
    results = await asyncio.gather(*(manager.step(session, Tick(n=1)) for _ in range(50)))
    assert [obs.reward for obs in results] == list(range(1, 51))
    assert session.step_count == 50
    await manager.shutdown()


def test_unsafe_environment_cannot_have_many_sessions() -> None:
    with pytest.raises(ConcurrencyConfigurationError):
        SessionManager(Unsafe, ServerConfig(max_concurrent_envs=4))
    assert SessionManager(Unsafe, ServerConfig()).max_sessions == 1
    assert SessionManager(Recorder, ServerConfig()).max_sessions > 1


def test_an_instance_is_not_a_factory() -> None:
    with pytest.raises(TypeError, match="callable factory"):
        SessionManager(Recorder(), ServerConfig())  # type: ignore[arg-type]


async def test_factory_failure_is_typed_and_frees_the_slot() -> None:
    def broken() -> Recorder:
        raise RuntimeError("no GPU")

    manager = SessionManager(broken, ServerConfig(max_concurrent_envs=1))
    with pytest.raises(FactoryError, match="no GPU"):
        await manager.create("ws")
    assert manager.slots.used == 0
    await manager.shutdown()


def test_filter_kwargs_follows_the_signature() -> None:
    env = Recorder()
    assert filter_kwargs(env.reset, {"seed": 1, "bogus": 2}) == {"seed": 1}
    assert filter_kwargs(env.step, {"anything": 1}) == {"anything": 1}


class ThreadRecorder(Recorder):
    threads: list[str] = []

    def step(self, action: Tick, timeout_s: Optional[float] = None, **kwargs: Any) -> Observation:
        import threading

        ThreadRecorder.threads.append(threading.current_thread().name)
        return super().step(action)


class InlineRecorder(ThreadRecorder):
    RUNS_ON_EVENT_LOOP = True


@pytest.mark.parametrize("env_cls, on_loop", [(ThreadRecorder, False), (InlineRecorder, True)])
async def test_sync_calls_leave_the_loop_unless_the_env_opts_in(env_cls, on_loop) -> None:
    import threading

    ThreadRecorder.threads.clear()
    manager = SessionManager(env_cls, ServerConfig(max_concurrent_envs=1, session_timeout=None))
    session = await manager.create("ws")
    await manager.step(session, Tick())
    loop_thread = threading.current_thread().name
    assert (ThreadRecorder.threads == [loop_thread]) is on_loop
    if not on_loop:
        assert ThreadRecorder.threads[0].startswith("openenv-env")
    await manager.shutdown()


def test_call_deadlines_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENENV_RESET_TIMEOUT", "OPENENV_STATE_TIMEOUT", "OPENENV_SHUTDOWN_GRACE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENENV_CALL_TIMEOUT", "40")
    monkeypatch.setenv("OPENENV_STEP_TIMEOUT", "5")
    config = ServerConfig.from_env()
    assert config.timeout_for("step") == 5
    assert config.timeout_for("reset") == config.timeout_for("state") == 40
    assert config.timeout_for("factory") == 40
    assert config.shutdown_grace_s == 10
    assert ServerConfig.from_env(call_timeout=0, step_timeout=0).timeout_for("step") is None
    monkeypatch.delenv("OPENENV_CALL_TIMEOUT")
    monkeypatch.delenv("OPENENV_STEP_TIMEOUT")
    assert ServerConfig.from_env().timeout_for("step") == 600  # finite by default


async def test_a_hung_factory_times_out_frees_its_slot_and_its_late_env_is_closed() -> None:
    import threading

    from openenv.core.errors import CallTimeoutError

    release = threading.Event()
    built: list[Recorder] = []

    def slow_factory() -> Recorder:
        release.wait(30)
        built.append(Recorder())
        return built[-1]

    manager = SessionManager(
        slow_factory, ServerConfig(max_concurrent_envs=1, session_timeout=None, call_timeout=0.2)
    )
    with pytest.raises(CallTimeoutError):
        await manager.create("ws")
    assert manager.slots.used == 0
    release.set()  # the factory returns after all: the abandoned thread closes what it built
    for _ in range(3000):
        if built and any(closed is built[0] for closed in Recorder.closed):
            break
        await asyncio.sleep(0.01)
    assert built and any(closed is built[0] for closed in Recorder.closed)
    await manager.shutdown()
