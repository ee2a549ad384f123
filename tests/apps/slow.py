"""A synchronous environment whose step blocks its thread (`time.sleep`).

`SlowAction.delay_ms` is how long the step sleeps (default `SLOW_STEP_MS`, 300 ms); the state
records the tags of applied steps in order.
"""

from __future__ import annotations

import os
import time
from typing import Any
from uuid import uuid4

from openenv.core.env_server import Action, Environment, Observation, State, create_app

DEFAULT_DELAY_MS = int(os.environ.get("SLOW_STEP_MS", "300"))


class SlowAction(Action):
    tag: str
    delay_ms: int | None = None


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
        delay = DEFAULT_DELAY_MS if action.delay_ms is None else action.delay_ms
        time.sleep(delay / 1000)
        self._state.tags = [*self._state.tags, action.tag]
        self._state.step_count += 1
        return SlowObservation(tag=action.tag, started_at=started, finished_at=time.time())

    @property
    def state(self) -> SlowState:
        return self._state


app = create_app(SlowEnv, SlowAction, SlowObservation)
