"""An environment whose reset always raises; step still works (reset is not required)."""

from __future__ import annotations

from typing import Any

from openenv.core.env_server import create_app

from .counter import CounterAction, CounterEnv, CounterObservation


class BrokenResetEnv(CounterEnv):
    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> CounterObservation:
        raise RuntimeError("reset exploded on purpose")


app = create_app(BrokenResetEnv, CounterAction, CounterObservation)
