"""TrajectoryRubric and ExponentialDiscountingTrajectoryRubric."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from openenv.core.rubrics import (
    ExponentialDiscountingTrajectoryRubric,
    Sequential,
    TrajectoryRubric,
    failed_rubric_path,
)

from .helpers import TextAction, TextObservation


class WinIfLastSaysWin(ExponentialDiscountingTrajectoryRubric):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.scored: list[list[Any]] = []

    def score_trajectory(self, trajectory: list[Any]) -> float:
        self.scored.append(trajectory)
        _, last_obs = trajectory[-1]
        return 1.0 if last_obs.text == "win" else 0.0


def step(text: str = "", done: bool = False) -> tuple[TextAction, TextObservation]:
    return TextAction(text=f"a-{text}"), TextObservation(text=text, done=done)


def play(rubric: Any, texts: list[str]) -> list[float]:
    scores = []
    for i, text in enumerate(texts):
        scores.append(rubric(*step(text, done=i == len(texts) - 1)))
    return scores


def test_intermediate_then_final_score() -> None:
    rubric = WinIfLastSaysWin(intermediate_reward=0.1)
    assert play(rubric, ["x", "y", "win"]) == [0.1, 0.1, 1.0]
    assert rubric.final_score == 1.0 and rubric.episode_done
    assert rubric.num_steps == 3
    assert len(rubric.scored) == 1  # scored once, at the end


def test_trajectory_is_a_copy_and_reset_clears() -> None:
    rubric = WinIfLastSaysWin()
    play(rubric, ["x", "lose"])
    trajectory = rubric.trajectory
    assert [obs.text for _, obs in trajectory] == ["x", "lose"]
    trajectory.clear()
    assert len(rubric.trajectory) == 2
    rubric.reset()
    assert rubric.trajectory == [] and rubric.num_steps == 0
    assert rubric.final_score is None and rubric.last_score is None
    assert rubric.compute_step_rewards() == []


def test_reset_reaches_trajectory_rubrics_inside_containers() -> None:
    inner = WinIfLastSaysWin()
    tree = Sequential(inner)
    play(tree, ["x", "win"])
    tree.reset()
    assert inner.trajectory == []


def test_max_steps_keeps_only_the_last_steps() -> None:
    rubric = WinIfLastSaysWin(gamma=0.5, max_steps=3)
    play(rubric, [str(i) for i in range(9)] + ["win"])
    assert [obs.text for _, obs in rubric.trajectory] == ["7", "8", "win"]
    assert rubric.num_steps == 10
    assert rubric.scored[0] == rubric.trajectory
    rewards = rubric.compute_step_rewards()
    assert len(rewards) == 10  # every step of the episode gets its reward
    assert rewards[-1] == 1.0 and rewards[0] == 0.5**9


def test_max_steps_validation_and_change() -> None:
    with pytest.raises(ValueError):
        WinIfLastSaysWin(max_steps=0)
    rubric = WinIfLastSaysWin()
    play(rubric, ["a", "b", "c", "lose"])
    rubric.max_steps = 2
    assert [obs.text for _, obs in rubric.trajectory] == ["c", "lose"]


def test_record_hook_stores_compact_summaries() -> None:
    class CountWins(TrajectoryRubric):
        def record(self, action: Any, observation: Any) -> Any:
            return observation.text == "win"  # one bool per step instead of the models

        def score_trajectory(self, trajectory: list[Any]) -> float:
            return sum(trajectory) / len(trajectory)

        def compute_step_rewards(self) -> list[float]:
            return [self.final_score or 0.0] * self.num_steps

    rubric = CountWins()
    assert play(rubric, ["win", "x", "win", "win"]) == [0.0, 0.0, 0.0, 0.75]
    assert rubric.trajectory == [True, False, True, True]
    assert rubric.compute_step_rewards() == [0.75] * 4


@pytest.mark.parametrize("gamma", [0.0, 0.5, 0.9, 1.0])
def test_discounting_math(gamma: float) -> None:
    rubric = WinIfLastSaysWin(gamma=gamma)
    play(rubric, ["a", "b", "c", "win"])
    expected = [1.0 * gamma ** (4 - 1 - t) for t in range(4)]
    assert rubric.compute_step_rewards() == pytest.approx(expected)


def test_discounting_scales_with_final_score() -> None:
    class Half(ExponentialDiscountingTrajectoryRubric):
        def score_trajectory(self, trajectory: list[Any]) -> float:
            return -0.5

    rubric = Half(gamma=0.9)
    play(rubric, ["a", "b", "c"])
    assert rubric.compute_step_rewards() == pytest.approx([-0.5 * 0.81, -0.5 * 0.9, -0.5])


@pytest.mark.parametrize("gamma", [-0.1, 1.01, 2])
def test_gamma_is_validated(gamma: float) -> None:
    with pytest.raises(ValueError, match="gamma"):
        WinIfLastSaysWin(gamma=gamma)


def test_step_rewards_need_a_finished_episode() -> None:
    rubric = WinIfLastSaysWin()
    rubric(*step("x"))
    with pytest.raises(RuntimeError, match="finished episode"):
        rubric.compute_step_rewards()


def test_state_dict_includes_config() -> None:
    rubric = WinIfLastSaysWin(gamma=0.9, intermediate_reward=0.05, max_steps=10)
    assert rubric.state_dict() == {"intermediate_reward": 0.05, "max_steps": 10, "gamma": 0.9}
    other = WinIfLastSaysWin()
    other.load_state_dict(rubric.state_dict())
    assert (other.gamma, other.intermediate_reward, other.max_steps) == (0.9, 0.05, 10)
    with pytest.raises(ValueError):
        other.load_state_dict({"gamma": 3.0})
    nested = Sequential(outcome=rubric)
    assert nested.state_dict()["outcome.gamma"] == 0.9


def test_dict_observations_work() -> None:
    rubric = WinIfLastSaysWin()

    class Obs(dict):
        text = "win"

    assert rubric({"move": 1}, Obs(done=True)) == 1.0


async def test_async_score_trajectory_makes_the_rubric_async() -> None:
    class SlowJudge(ExponentialDiscountingTrajectoryRubric):
        async def score_trajectory(self, trajectory: list[Any]) -> float:
            await asyncio.sleep(0.01)
            return len(trajectory) / 10

    rubric = SlowJudge(gamma=1.0)
    assert rubric.is_async
    assert await rubric(*step("x")) == 0.0
    assert await rubric(*step("y", done=True)) == 0.2
    assert rubric.final_score == 0.2
    assert rubric.compute_step_rewards() == [0.2, 0.2]


def test_errors_in_score_trajectory_propagate_with_their_type() -> None:
    class Broken(ExponentialDiscountingTrajectoryRubric):
        def score_trajectory(self, trajectory: list[Any]) -> float:
            raise ZeroDivisionError("no")

    with pytest.raises(ZeroDivisionError) as info:
        Sequential(outcome=Broken())(*step("x", done=True))
    assert failed_rubric_path(info.value) == "outcome"


def test_openenv_style_subclass_uses_self_trajectory() -> None:
    # Written as OpenEnv's TrajectoryRubric docstring shows it.
    class WinLoss(TrajectoryRubric):
        def score_trajectory(self, trajectory: list[Any]) -> float:
            _, final_obs = trajectory[-1]
            return 1.0 if final_obs.metadata.get("won") else 0.0

        def compute_step_rewards(self) -> list[float]:
            score = self.score_trajectory(self._trajectory)
            return [score] * len(self._trajectory)

        def reset(self) -> None:  # OpenEnv's own reset pattern, without super()
            self._trajectory = []

    rubric = WinLoss()
    rubric(*step("a"))
    action, obs = step("b", done=True)
    obs.metadata = {"won": True}
    assert rubric(action, obs) == 1.0
    assert len(rubric._trajectory) == 2 and rubric.compute_step_rewards() == [1.0, 1.0]
    rubric.reset()
    assert rubric._trajectory == [] and rubric.num_steps == 0 and not rubric.episode_done


def test_max_steps_trims_self_trajectory() -> None:
    rubric = WinIfLastSaysWin(gamma=0.5, max_steps=2)
    for word in ("a", "b", "c"):
        rubric(*step(word))
    assert [a.text for a, _ in rubric._trajectory] == ["a-b", "a-c"] and rubric.num_steps == 3
