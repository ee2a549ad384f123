"""The counter environment opted in to `RUNS_ON_EVENT_LOOP`, and the same without it.

Each observation says whether the call ran on the server's event loop (`on_loop`), so a test
sees where the server called the environment without timing anything.
"""

from __future__ import annotations

import asyncio
from typing import Any

from openenv.core.env_server import create_app
from tests.apps.counter import CounterAction, CounterEnv, CounterObservation


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False  # a worker thread: no loop runs there
    return True


class ThreadedCounterEnv(CounterEnv):
    def reset(self, *args: Any, **kwargs: Any) -> CounterObservation:
        obs = super().reset(*args, **kwargs)
        obs.metadata["on_loop"] = _on_event_loop()
        return obs

    def step(self, *args: Any, **kwargs: Any) -> CounterObservation:
        obs = super().step(*args, **kwargs)
        obs.metadata["on_loop"] = _on_event_loop()
        return obs


class OnLoopCounterEnv(ThreadedCounterEnv):
    RUNS_ON_EVENT_LOOP = True


app = create_app(OnLoopCounterEnv, CounterAction, CounterObservation, env_name="on_loop_env")
threaded_app = create_app(
    ThreadedCounterEnv, CounterAction, CounterObservation, env_name="threaded_env"
)
