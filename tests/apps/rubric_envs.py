"""Environments whose rewards come from rubrics: async, failing, and an unreachable LLM judge."""

from __future__ import annotations

import asyncio
from typing import Any

from openenv.core.env_server import Action, Environment, Observation, State, create_app
from openenv.core.llm_client import OpenAIClient
from openenv.core.rubrics import LLMJudge, Rubric, WeightedSum


class Say(Action):
    text: str


class AsyncLength(Rubric):
    async def forward(self, action: Any, observation: Any) -> float:
        await asyncio.sleep(0.001)
        return min(1.0, len(action.text) / 10)


class Polite(Rubric):
    def forward(self, action: Any, observation: Any) -> float:
        return 1.0 if "please" in action.text else 0.0


class Exploding(Rubric):
    def forward(self, action: Any, observation: Any) -> float:
        raise ZeroDivisionError("the rubric divided by zero")


class SayEnv(Environment[Say, Observation, State]):
    """A plain sync environment; its reward comes only from the rubric."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, rubric: Rubric | None = None) -> None:
        super().__init__(
            rubric=rubric or WeightedSum({"length": AsyncLength(), "polite": Polite()}, [0.5, 0.5])
        )
        self._state = State(step_count=0)

    def reset(self, seed=None, episode_id=None, **kwargs: Any) -> Observation:
        self._state = State(episode_id=episode_id, step_count=0)
        return Observation()

    def step(self, action: Say, timeout_s=None, **kwargs: Any) -> Observation:
        self._state.step_count += 1
        return Observation(done=self._state.step_count >= 3)

    @property
    def state(self) -> State:
        return self._state


def exploding() -> SayEnv:
    return SayEnv(WeightedSum({"ok": Polite(), "boom": Exploding()}, [0.5, 0.5]))


def unreachable_judge() -> SayEnv:
    # Port 9 (discard) on loopback: nothing listens, so the judge's LLM endpoint is down.
    client = OpenAIClient(base_url="http://127.0.0.1:9", model="judge", max_retries=0, timeout_s=2)
    return SayEnv(LLMJudge("Rate {action}", client))


app = create_app(SayEnv, Say, Observation)
exploding_app = create_app(exploding, Say, Observation)
judge_app = create_app(unreachable_judge, Say, Observation)
