"""`plain_env.py` written against the published OpenEnv package (`openenv==0.10.0`).

Same environment, served by the published `create_app` with SUPPORTS_CONCURRENT_SESSIONS and a
high `max_concurrent_envs`. Run it with the interpreter of the venv that holds OpenEnv.
"""

from __future__ import annotations

import os
from typing import Any, Optional
from uuid import uuid4

from openenv.core.env_server import Action, Environment, Observation, State, create_app


class PlainAction(Action):
    value: int = 0


class PlainObservation(Observation):
    value: int = 0


class PlainEnvironment(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(episode_id=str(uuid4()), step_count=0)

    def reset(
        self, seed: Optional[int] = None, episode_id: Optional[str] = None, **kwargs: Any
    ) -> PlainObservation:
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        return PlainObservation(value=0, done=False, reward=0.0)

    def step(
        self, action: PlainAction, timeout_s: Optional[float] = None, **kwargs: Any
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
