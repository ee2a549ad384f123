"""A plain typed environment for the benchmark, served by our `create_app`.

A sync `Environment` with an int action and a trivial step, so a step measures the server (frame
parsing, validation, session dispatch, thread hop for the sync method, serialisation) rather
than the environment. `plain_env_openenv.py` is the same environment for the published package.

Run alone: `uvicorn plain_env:app` from this folder (MAX_CONCURRENT_ENVS sets the session limit).
"""

from __future__ import annotations

import os
from typing import Any
from uuid import uuid4

from openenv.core.env_server import Action, Environment, Observation, State, create_app


class PlainAction(Action):
    value: int = 0


class PlainObservation(Observation):
    value: int = 0


class PlainEnvironment(Environment[PlainAction, PlainObservation, State]):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(episode_id=str(uuid4()), step_count=0)

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> PlainObservation:
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        return PlainObservation(value=0, done=False, reward=0.0)

    def step(
        self, action: PlainAction, timeout_s: float | None = None, **kwargs: Any
    ) -> PlainObservation:
        self._state.step_count += 1
        return PlainObservation(value=action.value + 1, done=False, reward=1.0)

    @property
    def state(self) -> State:
        return self._state


app = create_app(
    PlainEnvironment,
    PlainAction,
    PlainObservation,
    env_name="plain_env",
    max_concurrent_envs=int(os.environ.get("MAX_CONCURRENT_ENVS", "16384")),
)
