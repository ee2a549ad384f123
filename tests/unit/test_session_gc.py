"""`SessionHeapFreezer`: when it freezes the heap, and that cycles left by closed sessions are
collected once most frozen sessions are gone; `YoungGeneration`: the young threshold follows the
live sessions of every manager (real `gc`, real objects, a real `SessionManager`)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from openenv.core.env_server import ServerConfig, session_gc
from openenv.core.env_server.session_gc import (
    YOUNG_MAX,
    YOUNG_PER_SESSION,
    SessionHeapFreezer,
    YoungGeneration,
)
from openenv.core.env_server.sessions import SessionManager

from .test_sessions import Recorder


class Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the collector frees it


@pytest.fixture(autouse=True)
def thawed() -> Iterator[None]:
    """The test process's heap is left as it was found: nothing frozen by these tests."""
    frozen_before = gc.get_freeze_count()
    yield
    if gc.get_freeze_count() != frozen_before:
        gc.unfreeze()


def test_freezes_when_live_sessions_double_from_the_minimum() -> None:
    freezer = SessionHeapFreezer(min_sessions=4, enabled=True)
    for live in (1, 2, 3):
        freezer.opened(live)
    assert freezer.freezes == 0
    freezer.opened(4)
    assert (freezer.freezes, freezer.frozen_at) == (1, 4)
    assert gc.get_freeze_count() > 0
    for live in (5, 6, 7):
        freezer.opened(live)
    freezer.opened(8)
    assert (freezer.freezes, freezer.frozen_at) == (2, 8)


def test_cycles_of_closed_sessions_are_collected_once_most_are_gone() -> None:
    freezer = SessionHeapFreezer(min_sessions=4, enabled=True)
    session_object = Node()
    alive = weakref.ref(session_object)
    freezer.opened(8)
    del session_object
    gc.collect()
    assert alive() is not None  # frozen: full collections do not walk it
    freezer.closed(2)  # 2 * 4 >= 8: still most of the frozen sessions live
    assert freezer.thaws == 0 and alive() is not None
    freezer.closed(1)
    assert freezer.thaws == 1
    assert alive() is None
    assert freezer.frozen_at == 1  # the one live session was frozen again with the rest


def test_sessions_refrozen_below_the_minimum_are_collected_when_they_close() -> None:
    """A thaw refreezes the sessions still live; when the count falls below the minimum they
    must not stay frozen for good (the server may never reach the minimum again)."""
    freezer = SessionHeapFreezer(min_sessions=4, enabled=True)
    freezer.opened(16)
    survivors = [Node() for _ in range(3)]  # sessions that outlive the first thaw
    alive = [weakref.ref(node) for node in survivors]
    freezer.closed(3)  # 3 * 4 < 16: thawed, collected, the 3 live ones frozen again
    assert freezer.thaws == 1 and all(ref() is not None for ref in alive)
    survivors.clear()  # ... and then they close too: their cycles are garbage
    gc.collect()
    assert all(ref() is not None for ref in alive)  # frozen: still waiting
    freezer.closed(0)
    assert freezer.thaws == 2 and freezer.frozen_at == 0
    assert all(ref() is None for ref in alive)
    freezer.closed(0)  # nothing frozen any more: no more thaws
    assert freezer.thaws == 2


def test_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENENV_SESSION_GC_FREEZE", "0")
    frozen_before = gc.get_freeze_count()
    freezer = SessionHeapFreezer(min_sessions=1)
    freezer.opened(1000)
    freezer.closed(0)
    assert not freezer.enabled
    assert (freezer.freezes, freezer.thaws, gc.get_freeze_count()) == (0, 0, frozen_before)


@pytest.fixture
def threshold() -> Iterator[tuple[int, int, int]]:
    """The collector's thresholds as found (700 unless the process changed them), restored."""
    before = gc.get_threshold()
    yield before
    gc.set_threshold(*before)


class Owner:
    """Stands for a session manager: only its identity (and weak reference) is used."""


def test_young_threshold_follows_the_live_sessions_of_every_owner(
    threshold: tuple[int, int, int],
) -> None:
    floor, *older = threshold
    young = YoungGeneration()
    first, second = Owner(), Owner()
    young.update(first, 1)
    assert gc.get_threshold() == threshold  # one session: the process's own threshold
    many = floor // YOUNG_PER_SESSION + 100
    young.update(first, many)
    assert gc.get_threshold() == (YOUNG_PER_SESSION * many, *older)
    young.update(second, 50)  # the threshold is process-wide: both managers' sessions count
    assert gc.get_threshold()[0] == YOUNG_PER_SESSION * (many + 50)
    young.update(first, 10**6)
    assert gc.get_threshold()[0] == YOUNG_MAX  # capped: a young pass stays short
    young.update(first, 0)
    young.update(second, 0)
    assert gc.get_threshold() == threshold  # all closed: back to the process's own
    del second
    young.update(first, many)  # a manager that is gone no longer counts
    assert gc.get_threshold()[0] == YOUNG_PER_SESSION * many


def test_a_threshold_set_by_someone_else_is_the_new_floor(threshold: tuple[int, int, int]) -> None:
    young = YoungGeneration()
    owner = Owner()
    young.update(owner, 100)
    assert gc.get_threshold()[0] == YOUNG_PER_SESSION * 100
    gc.set_threshold(50_000, 20, 30)  # the application tunes the collector itself
    young.update(owner, 101)
    assert gc.get_threshold() == (50_000, 20, 30)  # above what 101 sessions need: kept
    young.update(owner, 2_000)
    assert gc.get_threshold() == (YOUNG_PER_SESSION * 2_000, 20, 30)
    young.update(owner, 0)
    assert gc.get_threshold() == (50_000, 20, 30)


def test_automatic_collection_turned_off_stays_off(threshold: tuple[int, int, int]) -> None:
    gc.set_threshold(0)
    young = YoungGeneration()
    young.update(Owner(), 1_000)
    assert gc.get_threshold()[0] == 0


async def test_young_generation_can_be_turned_off(
    monkeypatch: pytest.MonkeyPatch, threshold: tuple[int, int, int]
) -> None:
    monkeypatch.setenv("OPENENV_SESSION_GC_YOUNG", "0")
    monkeypatch.setattr(session_gc, "YOUNG_PER_SESSION", threshold[0])
    manager = SessionManager(Recorder, ServerConfig(max_concurrent_envs=4, session_timeout=None))
    assert manager.young_generation is None
    for _ in range(3):
        await manager.create("http")
    assert gc.get_threshold() == threshold
    await manager.shutdown()


async def test_a_session_manager_sizes_the_young_generation_as_sessions_open_and_close(
    monkeypatch: pytest.MonkeyPatch, threshold: tuple[int, int, int]
) -> None:
    monkeypatch.setattr(session_gc, "young_generation", YoungGeneration())
    per_session = threshold[0]  # so that two sessions need twice the process's threshold
    monkeypatch.setattr(session_gc, "YOUNG_PER_SESSION", per_session)
    manager = SessionManager(Recorder, ServerConfig(max_concurrent_envs=4, session_timeout=None))
    first = await manager.create("ws")
    assert gc.get_threshold()[0] == threshold[0]
    second = await manager.create("http")
    assert gc.get_threshold()[0] == 2 * per_session
    await manager.destroy(first)
    await manager.destroy(first)  # ended once: counted once
    assert gc.get_threshold()[0] == threshold[0]
    await manager.destroy(second)
    await manager.shutdown()
    assert gc.get_threshold() == threshold
