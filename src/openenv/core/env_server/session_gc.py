"""Keep live sessions' environments out of the garbage collector's full passes.

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
"""

from __future__ import annotations

import gc
import logging
import os

logger = logging.getLogger("openenv.server")

#: Live sessions at which the first freeze happens; below it full collections are cheap.
DEFAULT_MIN_SESSIONS = 64


class SessionHeapFreezer:
    """Freezes at 64, 128, 256, ... live sessions; thaws, collects and refreezes when most of
    the sessions frozen are gone. `OPENENV_SESSION_GC_FREEZE=0` turns it off."""

    def __init__(self, min_sessions: int | None = None, enabled: bool | None = None) -> None:
        if enabled is None:
            enabled = os.environ.get("OPENENV_SESSION_GC_FREEZE", "1") not in ("0", "false", "")
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
