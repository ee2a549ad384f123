"""An environment whose observations carry bytes (`WireBytes`): for binary-frame tests.

`FramesAction.size` is the length of the step's `frame`, bytes 0, 1, 2, ... (mod 256), so a
client can tell an attachment from base64 text of the same bytes.
"""

from __future__ import annotations

from typing import Any

from openenv.core.env_server import (
    Action,
    Environment,
    Observation,
    State,
    WireBytes,
    create_app,
)


class FramesAction(Action):
    size: int = 0


class FramesObservation(Observation):
    frame: WireBytes | None = None


class FramesEnv(Environment[FramesAction, FramesObservation, State]):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(step_count=0)

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> FramesObservation:
        self._state = State(step_count=0)
        return FramesObservation(done=False, reward=0.0)

    def step(
        self, action: FramesAction, timeout_s: float | None = None, **kwargs: Any
    ) -> FramesObservation:
        self._state.step_count += 1
        frame = bytes(i % 256 for i in range(action.size))
        return FramesObservation(frame=frame, done=False, reward=0.0)

    @property
    def state(self) -> State:
        return self._state


app = create_app(FramesEnv, FramesAction, FramesObservation, env_name="frames_env")
