"""A small typed environment for the client tests: a counter that records every applied step.

`CounterAction(delta, sleep_s, fail)`: the step sleeps `sleep_s` seconds (on the server's worker
thread), raises when `fail` is set, and otherwise adds `delta`. The state counts applied steps,
so a step lost or applied twice shows in `applied_steps` / `history`.
"""

from __future__ import annotations

import time
from typing import Any
from uuid import uuid4

from openenv.core.env_server import Action, Environment, Observation, State, create_app


class CounterAction(Action):
    delta: int = 1
    sleep_s: float = 0.0
    fail: bool = False


class CounterObservation(Observation):
    value: int = 0
    applied_steps: int = 0
    note: str = ""


class CounterState(State):
    value: int = 0
    applied_steps: int = 0
    history: list[int] = []
    label: str = "counter"


class CounterEnvironment(Environment[CounterAction, CounterObservation, CounterState]):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = CounterState(episode_id=str(uuid4()))

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> CounterObservation:
        self._state = CounterState(episode_id=episode_id or str(uuid4()), label="counter")
        return CounterObservation(
            value=0, applied_steps=0, note="reset", reward=0.0, metadata={"status": "ready"}
        )

    def step(
        self, action: CounterAction, timeout_s: float | None = None, **kwargs: Any
    ) -> CounterObservation:
        if action.sleep_s:
            time.sleep(action.sleep_s)
        if action.fail:
            raise ValueError("counter asked to fail")
        st = self._state
        st.value += action.delta
        st.applied_steps += 1
        st.step_count += 1
        st.history = [*st.history, action.delta]
        metadata: dict[str, Any] = {"applied": st.applied_steps}
        if timeout_s is not None or kwargs:  # what the client sent besides the action
            metadata["step_kwargs"] = {"timeout_s": timeout_s, **kwargs}
        return CounterObservation(
            value=st.value,
            applied_steps=st.applied_steps,
            note=f"added {action.delta}",
            reward=float(action.delta),
            done=st.value >= 1000,
            metadata=metadata,
        )

    @property
    def state(self) -> CounterState:
        return self._state


app = create_app(CounterEnvironment, CounterAction, CounterObservation, env_name="counter")
