"""A synchronous environment whose step blocks its thread (`time.sleep`).

`SlowAction.delay_ms` is how long the step sleeps (default `SLOW_STEP_MS`, 300 ms); the state
records the tags of applied steps in order.

Steps can also wait for each other, so tests see what the server does while steps are blocked
without timing anything (each wait fails after `WAIT_LIMIT_S`, which only a broken server
reaches), in this order:
- `meet` + `parties`: wait until that many steps are at the same named meeting (they overlap);
- `after_held`: wait until some step holds the named gate;
- `open_gate`: open the named gate;
- `hold`: block until the named gate is opened.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any
from uuid import uuid4

from openenv.core.env_server import Action, Environment, Observation, State, create_app

DEFAULT_DELAY_MS = int(os.environ.get("SLOW_STEP_MS", "300"))
WAIT_LIMIT_S = 60.0

_lock = threading.Lock()
_meetings: dict[str, threading.Barrier] = {}
_gates: dict[str, threading.Event] = {}
_holding: dict[str, threading.Event] = {}


def _named(table: dict[str, Any], name: str, make: Any) -> Any:
    with _lock:
        if name not in table:
            table[name] = make()
        return table[name]


def _wait(event: threading.Event, what: str) -> None:
    if not event.wait(WAIT_LIMIT_S):
        raise TimeoutError(f"{what} did not happen within {WAIT_LIMIT_S} s")


class SlowAction(Action):
    tag: str
    delay_ms: int | None = None
    meet: str | None = None
    parties: int = 2
    after_held: str | None = None
    open_gate: str | None = None
    hold: str | None = None


class SlowObservation(Observation):
    tag: str = ""
    started_at: float = 0.0
    finished_at: float = 0.0


class SlowState(State):
    tags: list[str] = []


class SlowEnv(Environment[SlowAction, SlowObservation, SlowState]):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = SlowState(episode_id=str(uuid4()))

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> SlowObservation:
        self._state = SlowState(episode_id=episode_id or str(uuid4()))
        return SlowObservation()

    def step(
        self, action: SlowAction, timeout_s: float | None = None, **kwargs: Any
    ) -> SlowObservation:
        started = time.time()
        if action.meet:
            make = lambda: threading.Barrier(action.parties, timeout=WAIT_LIMIT_S)  # noqa: E731
            _named(_meetings, action.meet, make).wait()
        if action.after_held:
            _wait(_named(_holding, action.after_held, threading.Event), "a step holding the gate")
        if action.open_gate:
            _named(_gates, action.open_gate, threading.Event).set()
        if action.hold:
            _named(_holding, action.hold, threading.Event).set()
            _wait(_named(_gates, action.hold, threading.Event), f"opening the gate {action.hold}")
        delay = DEFAULT_DELAY_MS if action.delay_ms is None else action.delay_ms
        time.sleep(delay / 1000)
        self._state.tags = [*self._state.tags, action.tag]
        self._state.step_count += 1
        return SlowObservation(tag=action.tag, started_at=started, finished_at=time.time())

    @property
    def state(self) -> SlowState:
        return self._state


app = create_app(SlowEnv, SlowAction, SlowObservation)
