"""The garbage collector under many live sessions: their environments kept out of full passes,
and a young generation sized to the number of sessions.

The app freezes its start-up objects (`runner.freeze_startup_objects`), but every session built
afterwards stays in the collector's generations: an MCP environment holds its own FastMCP server
and an open in-process client, thousands of objects each, and every full collection walks all of
them. At 1,024 echo sessions that was 2.5 s of full collections in a 3 s run (one pause 1.7 s).

`SessionHeapFreezer` freezes the heap each time the number of live sessions doubles (from
`min_sessions` up), after a young collection so that fresh garbage is not frozen with it. So the
freezes are few (log2 of the peak) and each one is O(1) (`gc.freeze` moves lists). Frozen objects
that become garbage are reclaimed by reference counting as before; only garbage *cycles* among
them wait, until live sessions fall below a quarter of those frozen: then the heap is thawed,
collected once and frozen again. Memory held that way is bounded by the peak session count.

The refreeze also freezes the sessions still live (it cannot tell them from the start-up
objects, which must stay frozen), so it counts them as frozen whatever their number: as they
close, the same rule thaws again (at a quarter of them, and finally at none). A server that
falls from thousands of sessions to a handful and stays there thus still collects the cycles
of the sessions that close later, after at most log4(peak) thaws.

`YoungGeneration` sizes the young generation's threshold to the live sessions of the process.
Between two steps of a session its in-flight objects (the step's coroutines, futures, action and
reply) stay alive while every other session steps, so the count of young objects swings by about
a dozen per live session. With CPython's default threshold of 700, past ~50 sessions that swing
alone triggers young collections that find nothing to free but promote everything they see: at
1,024 echo sessions in process, 4,500 young, 400 middle and 37 full collections in 300,000 steps,
8 of 33 s of CPU (plain env: 3.2 of 13.5 s). A threshold of `YOUNG_PER_SESSION` per live session
(never below the process's own, at most `YOUNG_MAX`) keeps the swing inside one generation: 0 to
11 young collections over the same steps. Pauses stay short (a young pass walks at most the
threshold's objects: ~12 ms at 32,768) and memory held by young cycles stays bounded by it.
"""

from __future__ import annotations

import gc
import logging
import weakref

from openenv import settings

logger = logging.getLogger("openenv.server")


#: Live sessions at which the first freeze happens; below it full collections are cheap.
DEFAULT_MIN_SESSIONS = 64


class SessionHeapFreezer:
    """Freezes at 64, 128, 256, ... live sessions; thaws, collects and refreezes when most of
    the sessions frozen are gone. `OPENENV_SESSION_GC_FREEZE=0` turns it off."""

    def __init__(self, min_sessions: int | None = None, enabled: bool | None = None) -> None:
        if enabled is None:
            enabled = settings.SESSION_GC_FREEZE.get()
        self.enabled = enabled
        self.min_sessions = min_sessions or DEFAULT_MIN_SESSIONS
        #: Live sessions at the last freeze (0: none frozen yet).
        self.frozen_at = 0
        self.freezes = 0
        self.thaws = 0

    def opened(self, live: int) -> None:
        if not self.enabled or live < max(self.min_sessions, 2 * self.frozen_at):
            return
        gc.collect(1)  # young garbage (a step's cycles) is not kept with the frozen sessions
        gc.freeze()
        self.frozen_at = live
        self.freezes += 1

    def closed(self, live: int) -> None:
        if not self.enabled or not self.frozen_at or live * 4 >= self.frozen_at:
            return
        # Most frozen sessions are gone: let the collector see the cycles they left.
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self.thaws += 1
        # The live sessions were frozen again: count them (below the minimum too), so that
        # their cycles are collected once most of them have closed in turn.
        self.frozen_at = live


#: Young-generation objects allowed per live session (about twice the swing measured per session).
YOUNG_PER_SESSION = 32
#: The largest young threshold set (reached at 4,096 live sessions).
YOUNG_MAX = 1 << 17


class YoungGeneration:
    """Keeps `gc`'s young threshold at `YOUNG_PER_SESSION` x the live sessions of every session
    manager in the process (the threshold is process-wide), never below the threshold the process
    had before (or set since: a change made by someone else becomes the new floor) and never
    touching a threshold of 0 (automatic collection off)."""

    def __init__(self) -> None:
        self._live: weakref.WeakKeyDictionary[object, int] = weakref.WeakKeyDictionary()
        #: The threshold the process had before this class changed it, or set since.
        self.floor: int | None = None
        #: The threshold last set (or found and kept) here.
        self._applied: int | None = None

    def update(self, owner: object, live: int) -> None:
        """`owner` (a session manager) now has `live` sessions: resize the young generation."""
        self._live[owner] = live
        young, *older = gc.get_threshold()
        floor = self.floor
        if floor is None or young != self._applied:
            floor = self.floor = young  # first use, or changed by someone else since
        if floor == 0:
            return  # automatic collection is off: not ours to turn back on
        wanted = max(floor, min(YOUNG_PER_SESSION * sum(self._live.values()), YOUNG_MAX))
        if wanted != young:
            gc.set_threshold(wanted, *older)
        self._applied = wanted


#: The process's one instance: the threshold it sets is shared by every server in the process.
young_generation = YoungGeneration()


def sized_young_generation() -> YoungGeneration | None:
    """The instance a new session manager reports to; None when `OPENENV_SESSION_GC_YOUNG=0`
    (read when the manager is made)."""
    return young_generation if settings.SESSION_GC_YOUNG.get() else None
