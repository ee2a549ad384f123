"""An async environment whose step can ignore its cancellation, for the deadline tests.

`StubbornAction.mode`:
- `"quick"`: returns at once (no await);
- `"wait"`: awaits `asyncio.sleep(0)` once, then returns;
- `"stubborn"`: sleeps, swallows the cancellation of its deadline, then goes on sleeping for a
  moment before it records that it finished (`finished_after_cancel` in every observation, a
  count for the whole process);
- `"honest"`: sleeps until cancelled, then re-raises.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal
from uuid import uuid4

from openenv.core.env_server import Action, Environment, Observation, State, create_app

_finished_after_cancel = 0


class StubbornAction(Action):
    mode: Literal["quick", "wait", "stubborn", "honest"] = "quick"


class StubbornObservation(Observation):
    mode: str = ""
    finished_after_cancel: int = 0


class StubbornEnv(Environment[StubbornAction, StubbornObservation, State]):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(episode_id=str(uuid4()))

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> StubbornObservation:
        self._state = State(episode_id=episode_id or str(uuid4()))
        return StubbornObservation(finished_after_cancel=_finished_after_cancel)

    def step(self, action: StubbornAction, **kwargs: Any) -> StubbornObservation:
        raise NotImplementedError("async only")

    async def step_async(self, action: StubbornAction, **kwargs: Any) -> StubbornObservation:
        global _finished_after_cancel
        self._state.step_count += 1
        if action.mode == "wait":
            await asyncio.sleep(0)
        elif action.mode == "honest":
            await asyncio.sleep(3600)
        elif action.mode == "stubborn":
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                await asyncio.sleep(0.2)  # goes on after its deadline
                _finished_after_cancel += 1
        return StubbornObservation(mode=action.mode, finished_after_cancel=_finished_after_cancel)

    @property
    def state(self) -> State:
        return self._state


app = create_app(StubbornEnv, StubbornAction, StubbornObservation, env_name="stubborn")
