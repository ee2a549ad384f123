"""Rubrics through the existing `Environment` helpers (_apply_rubric*, _reset_rubric*)."""

from __future__ import annotations

from typing import Any

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import State
from openenv.core.rubrics import ExponentialDiscountingTrajectoryRubric, Rubric, Sequential

from .helpers import AsyncConst, Const, TextAction, TextObservation


class Outcome(ExponentialDiscountingTrajectoryRubric):
    def score_trajectory(self, trajectory: list[Any]) -> float:
        return 1.0 if trajectory[-1][0].text == "win" else 0.0


class GameEnv(Environment[TextAction, TextObservation, State]):
    def __init__(self, rubric: Rubric) -> None:
        super().__init__(rubric=rubric)
        self._state = State()

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kw: Any) -> Any:
        self._reset_rubric()
        self._state = State(episode_id=episode_id)
        return TextObservation(text="start")

    def step(self, action: TextAction, timeout_s: float | None = None, **kw: Any) -> Any:
        self._state.step_count += 1
        obs = TextObservation(text=action.text, done=action.text in ("win", "lose"))
        obs.reward = self._apply_rubric(action, obs)
        return obs

    async def step_async(
        self, action: TextAction, timeout_s: float | None = None, **kw: Any
    ) -> Any:
        obs = TextObservation(text=action.text, done=action.text in ("win", "lose"))
        obs.reward = await self._apply_rubric_async(action, obs)
        return obs

    @property
    def state(self) -> State:
        return self._state


def test_sync_env_with_trajectory_rubric() -> None:
    outcome = Outcome(gamma=0.5)
    env = GameEnv(Sequential(outcome=outcome))
    env.reset()
    rewards = [env.step(TextAction(text=t)).reward for t in ("a", "b", "win")]
    assert rewards == [0.0, 0.0, 1.0]
    assert outcome.compute_step_rewards() == [0.25, 0.5, 1.0]
    assert env.rubric.component_scores() == {"outcome": 1.0}
    env.reset()
    assert outcome.trajectory == [] and env.rubric.component_scores() == {}


async def test_async_env_with_async_rubric() -> None:
    env = GameEnv(Sequential(format=Const(1.0), judge=AsyncConst(0.5, delay=0.01)))
    obs = await env.step_async(TextAction(text="x"))
    assert obs.reward == 0.5
    await env._reset_rubric_async()
    assert env.rubric.component_scores() == {}


async def test_sync_step_with_async_rubric_inside_a_running_loop() -> None:
    env = GameEnv(AsyncConst(0.25))
    assert env.step(TextAction(text="x")).reward == 0.25
