"""An app whose environment factory always raises (FACTORY_ERROR at connect)."""

from __future__ import annotations

from openenv.core.env_server import create_app

from .counter import CounterAction, CounterEnv, CounterObservation


def broken_counter() -> CounterEnv:
    raise RuntimeError("factory exploded on purpose")


app = create_app(broken_counter, CounterAction, CounterObservation)
