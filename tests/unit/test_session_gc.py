"""`SessionHeapFreezer`: when it freezes the heap, and that cycles left by closed sessions are
collected once most frozen sessions are gone (real `gc`, real objects)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from openenv.core.env_server.session_gc import SessionHeapFreezer


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
