"""An environment that counts its own live instances, for the server's limits tests.

- It declares `SUPPORTS_CONCURRENT_SESSIONS = False`: the server must never hold more than one
  instance at once. Each instance counts itself from construction to `close()`; `peak` is the
  most that were ever alive together (in this app, since it was built).
- `LimitsAction.size` makes the step's observation carry that many bytes of `payload` (large
  replies); `hold_ms` keeps the step busy a little, so calls that run at once overlap.
- `LimitsAction.size == -7` makes the action model itself fail with a TypeError (a bug in the
  model, not a validation error): a server fault, for error-typing tests.
- `state` reports `live` and `peak`.
"""

from __future__ import annotations

import threading
import time
from typing import Any
from uuid import uuid4

from pydantic import field_validator

from openenv.core.env_server import Action, Environment, Observation, State, create_app

MODEL_BUG = -7

_lock = threading.Lock()
_live = 0
_peak = 0


def _count(delta: int) -> tuple[int, int]:
    global _live, _peak
    with _lock:
        _live += delta
        _peak = max(_peak, _live)
        return _live, _peak


class LimitsAction(Action):
    size: int = 0
    hold_ms: int = 0

    @field_validator("size")
    @classmethod
    def _model_bug(cls, value: int) -> int:
        if value == MODEL_BUG:
            raise TypeError("a bug in the action model")
        return value


class LimitsObservation(Observation):
    payload: str = ""
    live: int = 0
    peak: int = 0


class LimitsState(State):
    live: int = 0
    peak: int = 0


class LimitsEnv(Environment[LimitsAction, LimitsObservation, LimitsState]):
    SUPPORTS_CONCURRENT_SESSIONS = False

    def __init__(self) -> None:
        super().__init__()
        _count(+1)
        self._closed = False
        self._state = LimitsState(episode_id=str(uuid4()))

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> LimitsObservation:
        self._state = LimitsState(episode_id=episode_id or str(uuid4()))
        live, peak = _count(0)
        return LimitsObservation(live=live, peak=peak, reward=0.0)

    def step(self, action: LimitsAction, **kwargs: Any) -> LimitsObservation:
        if action.hold_ms:
            time.sleep(action.hold_ms / 1000)
        self._state.step_count += 1
        live, peak = _count(0)
        return LimitsObservation(payload="x" * action.size, live=live, peak=peak, reward=1.0)

    @property
    def state(self) -> LimitsState:
        live, peak = _count(0)
        return self._state.model_copy(update={"live": live, "peak": peak})

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            _count(-1)


app = create_app(LimitsEnv, LimitsAction, LimitsObservation, env_name="limits_env")
