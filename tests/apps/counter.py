"""A typed, deterministic counter environment used by the conformance tests.

- `CounterAction.amount` is a typed int field; `amount == 13` makes `step` raise (the session
  stays usable afterwards).
- `reset(seed)` starts the counter at a value derived only from the seed.
- `reset` returns an int reward (0); `step` returns a bool reward (True when the count is even).
- `CounterState` adds fields to `State`.
- `close()` appends the episode id to the file named by `OPENENV_TEST_CLOSE_MARKER`, if set.
"""

from __future__ import annotations

import os
import random
from typing import Any
from uuid import uuid4

from openenv.core.env_server import Action, Environment, Observation, State, create_app

UNLUCKY = 13
#: Read when the module is loaded, so each server (process or in-process app) has its own file.
CLOSE_MARKER = os.environ.get("OPENENV_TEST_CLOSE_MARKER")


class CounterAction(Action):
    amount: int


class CounterObservation(Observation):
    count: int = 0
    history_length: int = 0


class CounterState(State):
    count: int = 0
    seed: int | None = None
    history: list[int] = []


class CounterEnv(Environment[CounterAction, CounterObservation, CounterState]):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = CounterState(episode_id=str(uuid4()))

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> CounterObservation:
        start = random.Random(seed).randint(0, 1000) if seed is not None else 0
        self._state = CounterState(
            episode_id=episode_id or str(uuid4()), step_count=0, count=start, seed=seed
        )
        return CounterObservation(count=start, reward=0, done=False, metadata={"start": start})

    def step(
        self, action: CounterAction, timeout_s: float | None = None, **kwargs: Any
    ) -> CounterObservation:
        if action.amount == UNLUCKY:
            raise ValueError(f"unlucky amount {UNLUCKY}")
        state = self._state
        state.count += action.amount
        state.step_count += 1
        state.history = [*state.history, action.amount]
        return CounterObservation(
            count=state.count,
            history_length=len(state.history),
            reward=state.count % 2 == 0,
            done=False,
            metadata={"step": state.step_count},
        )

    @property
    def state(self) -> CounterState:
        return self._state

    def close(self) -> None:
        if CLOSE_MARKER:
            with open(CLOSE_MARKER, "a", encoding="utf-8") as fh:
                fh.write(f"{self._state.episode_id}\n")


app = create_app(CounterEnv, CounterAction, CounterObservation, env_name="counter_env")
