"""An environment whose step observation carries a value JSON cannot encode (its own bug)."""

from __future__ import annotations

from typing import Any

from openenv.core.env_server import create_app

from .counter import CounterAction, CounterEnv, CounterObservation


class UnencodableEnv(CounterEnv):
    def step(self, action: CounterAction, timeout_s: float | None = None, **kwargs: Any):
        obs = super().step(action)
        obs.metadata = {"handle": object()}
        return obs


app = create_app(UnencodableEnv, CounterAction, CounterObservation)
