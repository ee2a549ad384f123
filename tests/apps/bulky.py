"""An environment whose replies are as large as the client asks: for slow-reader tests.

`BulkyAction.size` is the length of the `blob` the step's observation carries.
"""

from __future__ import annotations

from typing import Any

from openenv.core.env_server import Action, Environment, Observation, State, create_app


class BulkyAction(Action):
    size: int = 0


class BulkyObservation(Observation):
    blob: str = ""


class BulkyEnv(Environment[BulkyAction, BulkyObservation, State]):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(step_count=0)

    def reset(self, seed: int | None = None, **kwargs: Any) -> BulkyObservation:
        self._state = State(step_count=0)
        return BulkyObservation(done=False, reward=0.0)

    def step(self, action: BulkyAction, **kwargs: Any) -> BulkyObservation:
        self._state.step_count += 1
        return BulkyObservation(blob="x" * action.size, done=False, reward=0.0)

    @property
    def state(self) -> State:
        return self._state


app = create_app(BulkyEnv, BulkyAction, BulkyObservation, env_name="bulky_env")
