"""EnvFleet and its vector client against real echo servers started by the local provider.

One fleet (through the sync twin, whose loop thread outlives each test's event loop) is shared
by the tests that leave it as they found it; tests that kill a server or count creations make
their own. No test asserts on timings: the rate limit is checked on an injected clock and by
counting creations.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from openenv.core.errors import InvalidRequestError, is_infrastructure_error
from openenv.fleet import (
    CreationRateLimiter,
    EnvFleet,
    FleetFullError,
    NeedsResetError,
    ServerLostError,
    SyncEnvFleet,
)
from openenv.providers.local import LocalProcessProvider
from openenv.providers.ownership import local_records, process_alive

ECHO = "echo"
STEP = {"type": "call_tool", "tool_name": "echo_message", "arguments": {"message": "hi"}}
BAD_STEP = {"type": "no_such_action"}


def echoed(result: Any) -> str:
    return str(result.observation["result"]["data"])


def wait_until(check: Any, within_s: float = 30.0) -> bool:
    """Poll `check()` until true (a bounded wait, not a timing assertion)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The module's own provider records, so the leak checks see only what it made."""
    path = tmp_path_factory.mktemp("fleet-state")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OPENENV_STATE_DIR", str(path))
        yield path


@pytest.fixture(scope="module")
def fleet(state_dir: Path) -> Iterator[SyncEnvFleet]:
    """Three echo servers of four sessions each, shared by the tests that leave it intact."""
    with EnvFleet(ECHO, servers=3, sessions_per_server=4, acquire_timeout_s=30).sync() as shared:
        yield shared


# -- the rate limit ----------------------------------------------------------------------------


async def test_rate_limiter_spaces_creations_evenly() -> None:
    now = [100.0]
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)

    limiter = CreationRateLimiter(4.0, clock=lambda: now[0], sleep=fake_sleep)
    for _ in range(5):
        await limiter.wait_turn()
    # Five turns claimed at once: the first now, each next one a quarter second later.
    assert slept == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert limiter.granted == 5
    now[0] += 10.0  # idle long enough: no debt carried over, no burst saved up either
    slept.clear()
    await limiter.wait_turn()
    await limiter.wait_turn()
    assert slept == pytest.approx([0.25])


class CappedLocalProvider(LocalProcessProvider):
    """A local provider that declares a service cap on creates, as Daytona's does."""

    max_creates_per_s = 40.0

    def __init__(self) -> None:
        super().__init__()
        self.creations = 0

    async def _start(self, spec: Any) -> Any:
        self.creations += 1
        return await super()._start(spec)


async def test_fleet_honours_the_lower_of_its_and_the_providers_creation_limit(
    state_dir: Path,
) -> None:
    provider = CappedLocalProvider()
    async with EnvFleet(ECHO, provider=provider, servers=2, max_creates_per_s=100.0) as fleet:
        assert fleet.stats().max_creates_per_s == 40.0
        assert provider.creations == fleet.creations == fleet.stats().servers_started == 2
    await provider.close()
    async with EnvFleet(ECHO, provider=CappedLocalProvider(), max_creates_per_s=5.0) as fleet:
        assert fleet.stats().max_creates_per_s == 5.0


# -- placement and backpressure ----------------------------------------------------------------


def test_sessions_go_to_the_least_loaded_server(fleet: SyncEnvFleet) -> None:
    sessions = [fleet.acquire() for _ in range(6)]
    try:
        assert fleet.stats().load == (2, 2, 2)
        servers = {fleet.fleet.server_of(s.async_client).id for s in sessions}  # type: ignore[union-attr]
        assert len(servers) == 3
        fleet.release(sessions.pop(0))
        # The freed slot's server is now the least loaded: the next session goes there.
        assert sorted(fleet.stats().load) == [1, 2, 2]
        sessions.append(fleet.acquire())
        assert fleet.stats().load == (2, 2, 2)
    finally:
        for session in sessions:
            fleet.release(session)
    assert fleet.stats().sessions == 0


def test_a_full_fleet_makes_acquire_wait_then_raise(fleet: SyncEnvFleet) -> None:
    sessions = [fleet.acquire() for _ in range(12)]
    try:
        assert fleet.stats().sessions == fleet.stats().capacity == 12
        with pytest.raises(FleetFullError, match="no free session") as raised:
            fleet.acquire(timeout_s=0.2)
        assert is_infrastructure_error(raised.value)

        got: list[Any] = []
        waiter = threading.Thread(target=lambda: got.append(fleet.acquire(timeout_s=60)))
        waiter.start()
        fleet.release(sessions.pop())
        waiter.join(60)
        assert len(got) == 1, "the waiting acquire never got the freed slot"
        sessions.append(got[0])
        assert fleet.stats().sessions == 12
    finally:
        for session in sessions:
            fleet.release(session)


async def test_the_pool_is_sized_by_sessions_and_grows_up_to_max_servers(
    state_dir: Path,
) -> None:
    async with EnvFleet(ECHO, sessions=5, sessions_per_server=2) as fleet:
        assert fleet.stats().servers == 3 and fleet.stats().capacity == 6
    async with EnvFleet(ECHO, servers=1, sessions_per_server=2, max_servers=2) as fleet:
        sessions = [await fleet.acquire() for _ in range(2)]
        assert fleet.stats().servers == 1
        sessions.append(await fleet.acquire(timeout_s=60))  # waits for a second server
        assert fleet.stats().servers == 2 and fleet.stats().load == (2, 1)
        sessions.append(await fleet.acquire(timeout_s=60))
        with pytest.raises(FleetFullError):
            await fleet.acquire(timeout_s=0.1)  # no third server: max_servers=2
        assert fleet.stats().servers_started == 2


def test_a_session_is_an_ordinary_client(fleet: SyncEnvFleet) -> None:
    with fleet.session() as env:
        env.reset()
        assert echoed(env.step(STEP)) == "hi"
        assert fleet.stats().sessions == 1
    assert fleet.stats().sessions == 0


# -- the vector client -------------------------------------------------------------------------


def test_vector_results_come_in_order_with_errors_per_slot(fleet: SyncEnvFleet) -> None:
    with fleet.vector(5) as vec:
        assert vec.num_envs == 5
        assert all(vec.reset(seed=7).ok)
        actions = [
            {**STEP, "arguments": {"message": f"m{i}"}} if i != 2 else BAD_STEP for i in range(5)
        ]
        batch = vec.step(actions)
        assert [s.index for s in batch] == [0, 1, 2, 3, 4]
        assert batch.ok == [True, True, False, True, True]
        assert isinstance(batch[2].error, InvalidRequestError)
        assert not batch[2].infrastructure_failure
        assert [echoed(batch[i].result) for i in (0, 1, 3, 4)] == ["m0", "m1", "m3", "m4"]
        # A client error leaves the session and its episode as they were.
        again = vec.step([STEP] * 5)
        assert all(again.ok)
        # A subset of slots, by index.
        part = vec.step([STEP, STEP], indices=[4, 1])
        assert [s.index for s in part] == [4, 1] and all(part.ok)
    assert fleet.stats().sessions == 0


def test_a_slot_must_be_reset_before_it_is_stepped_unless_autoreset(fleet: SyncEnvFleet) -> None:
    with fleet.vector(2) as vec:
        batch = vec.step([STEP, STEP])
        assert all(isinstance(e, NeedsResetError) for e in batch.errors)
    with fleet.vector(2, autoreset=True) as vec:
        batch = vec.step([STEP, STEP])
        assert all(batch.ok) and all(s.autoreset for s in batch)
        assert batch.observations[0]["echoed_message"] == "Echo environment ready!"
        batch = vec.step([STEP, STEP])
        assert not any(s.autoreset for s in batch) and echoed(batch[1].result) == "hi"


# -- a server dies mid-episode -----------------------------------------------------------------


async def test_a_killed_server_fails_its_episodes_as_infrastructure_and_is_replaced(
    state_dir: Path,
) -> None:
    async with EnvFleet(
        ECHO, servers=2, sessions_per_server=2, health_interval_s=0.2, acquire_timeout_s=60
    ) as fleet:
        vec = await fleet.vector(4)
        assert all((await vec.reset()).ok)
        victim = fleet.server_of(vec.sessions[0])  # type: ignore[arg-type]
        assert victim is not None
        on_victim = [i for i, c in enumerate(vec.sessions) if fleet.server_of(c) == victim]  # type: ignore[arg-type]
        assert len(on_victim) == 2
        os.kill(victim.info["pid"], signal.SIGKILL)

        batch = await vec.step([STEP] * 4)
        for slot in batch:
            if slot.index in on_victim:
                assert isinstance(slot.error, ServerLostError), slot.error
                assert slot.error.category == "infrastructure" and slot.infrastructure_failure
                assert slot.result is None  # no reward, not even 0
            else:
                assert slot.ok and echoed(slot.result) == "hi"

        for _ in range(600):  # the replacement starts in the background
            stats = fleet.stats()
            if stats.servers == 2 and stats.servers_lost == 1 and not stats.starting:
                break
            await asyncio.sleep(0.05)
        assert fleet.stats().servers_started == 3
        assert victim.id not in {env.id for env in fleet.servers()}
        assert not process_alive(victim.info["pid"], None)

        # Stepping a failed slot again says it needs a reset; the reset moves it to a new
        # session on a live server.
        assert isinstance((await vec.step([STEP] * 4))[on_victim[0]].error, NeedsResetError)
        assert all((await vec.reset(indices=on_victim)).ok)
        assert all(fleet.server_of(c) != victim for c in vec.sessions)  # type: ignore[arg-type]
        assert all((await vec.step([STEP] * 4)).ok)
        await vec.close()


# -- nothing leaks -----------------------------------------------------------------------------


async def test_close_stops_every_server_and_session(state_dir: Path) -> None:
    fleet = EnvFleet(ECHO, servers=2, sessions_per_server=3)
    await fleet.start()
    vec = await fleet.vector(5)
    await vec.reset()
    pids = [env.info["pid"] for env in fleet.servers()]
    ids = {env.id for env in fleet.servers()}
    assert ids <= {record.id for record in local_records()}
    await fleet.close()
    await fleet.close()  # twice is fine
    assert wait_until(lambda: not any(process_alive(pid, None) for pid in pids))
    assert not ids & {record.id for record in local_records()}
    with pytest.raises(Exception, match="closed"):
        await fleet.acquire()


@pytest.mark.slow  # probes of a frozen server wait out their timeout
async def test_a_silent_server_is_replaced_after_its_grace(
    state_dir: Path,
) -> None:
    async with EnvFleet(
        ECHO, servers=2, sessions_per_server=4, health_interval_s=0.2, unhealthy_after_s=1.0
    ) as fleet:
        frozen = fleet.servers()[0]
        os.kill(frozen.info["pid"], signal.SIGSTOP)  # alive to its provider, silent on /health
        try:
            for _ in range(600):
                if fleet.stats().servers_lost == 1 and fleet.stats().servers == 2:
                    break
                await asyncio.sleep(0.05)
            assert fleet.stats().servers_lost == 1
            assert frozen.id not in {env.id for env in fleet.servers()}
            async with fleet.session() as env:
                assert fleet.server_of(env) != frozen
                await env.reset()
        finally:
            if process_alive(frozen.info["pid"], None):
                os.kill(frozen.info["pid"], signal.SIGKILL)
