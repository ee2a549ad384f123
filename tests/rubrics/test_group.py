"""Group-relative (GRPO-style) advantages."""

from __future__ import annotations

import asyncio
import math
import statistics
from typing import Any

import pytest

from openenv.core.rubrics import (
    ExponentialDiscountingTrajectoryRubric,
    GroupRelativeRubric,
    Rubric,
    group_relative_advantages,
)

from .helpers import TextAction, TextObservation

REWARDS = [1.0, 0.0, 0.5, 0.5]


def test_standard_advantages() -> None:
    mean = statistics.fmean(REWARDS)
    std = statistics.pstdev(REWARDS)
    expected = [(r - mean) / (std + 1e-6) for r in REWARDS]
    result = group_relative_advantages(REWARDS)
    assert result == pytest.approx(expected)
    assert sum(result) == pytest.approx(0.0, abs=1e-9)


def test_sample_std() -> None:
    std = statistics.stdev(REWARDS)
    result = group_relative_advantages(REWARDS, ddof=1, eps=0.0)
    assert result == pytest.approx([(r - 0.5) / std for r in REWARDS])


def test_without_std_normalization() -> None:
    assert group_relative_advantages(REWARDS, normalize_std=False) == [0.5, -0.5, 0.0, 0.0]


def test_leave_one_out_baseline() -> None:
    result = group_relative_advantages(REWARDS, normalize_std=False, leave_one_out=True)
    # r_i - mean of the other three
    assert result == pytest.approx([1.0 - 1.0 / 3, 0.0 - 2.0 / 3, 0.5 - 1.5 / 3, 0.5 - 1.5 / 3])
    # RLOO advantages are the plain ones scaled by n / (n - 1)
    plain = group_relative_advantages(REWARDS, normalize_std=False)
    assert result == pytest.approx([a * 4 / 3 for a in plain])
    normalized = group_relative_advantages(REWARDS, leave_one_out=True)
    std = statistics.pstdev(REWARDS)
    assert normalized == pytest.approx([a / (std + 1e-6) for a in result])


def test_degenerate_groups() -> None:
    assert group_relative_advantages([]) == []
    assert group_relative_advantages([0.7]) == [0.0]
    assert group_relative_advantages([0.7], leave_one_out=True) == [0.0]
    assert group_relative_advantages([1.0, 1.0, 1.0]) == [0.0, 0.0, 0.0]  # std 0: eps saves us
    with pytest.raises(ValueError):
        group_relative_advantages([1.0, math.nan])
    with pytest.raises(ValueError):
        group_relative_advantages([1.0, 0.0], ddof=2)


def test_rubric_on_reward_lists() -> None:
    grader = GroupRelativeRubric(normalize_std=False)
    assert grader.score_group([3, 1, 2]) == [1.0, -1.0, 0.0]
    assert grader.last_rewards == [3.0, 1.0, 2.0]
    assert grader.last_advantages == [1.0, -1.0, 0.0]
    with pytest.raises(ValueError, match="inner rubric"):
        grader.score_group([[(TextAction(), TextObservation(done=True))]])


class Outcome(ExponentialDiscountingTrajectoryRubric):
    def score_trajectory(self, trajectory: list[Any]) -> float:
        return 1.0 if trajectory[-1][1].text == "win" else 0.0


def episode(*texts: str) -> list[tuple[TextAction, TextObservation]]:
    return [
        (TextAction(text=t), TextObservation(text=t, done=i == len(texts) - 1))
        for i, t in enumerate(texts)
    ]


def test_rubric_replays_recorded_trajectories() -> None:
    outcome = Outcome(intermediate_reward=0.0)
    grader = GroupRelativeRubric(outcome, episode_reward="last", normalize_std=False)
    group = [episode("a", "win"), episode("a", "b", "lose"), episode("win"), episode("x", "lose")]
    assert grader.score_group(group) == [0.5, -0.5, 0.5, -0.5]
    assert grader.last_rewards == [1.0, 0.0, 1.0, 0.0]
    assert outcome.num_steps == 2  # reset before each episode, so only the last one is kept


def test_episode_reward_aggregates() -> None:
    class StepScore(Rubric):
        def forward(self, action: Any, observation: Any) -> float:
            return float(len(observation.text))

    trajectory = episode("a", "bb", "ccc")
    for how, expected in (("sum", 6.0), ("last", 3.0), ("mean", 2.0), (max, 3.0)):
        assert (
            GroupRelativeRubric(StepScore(), episode_reward=how).episode_return(trajectory)
            == expected
        )
    with pytest.raises(ValueError):
        GroupRelativeRubric(StepScore(), episode_reward="median")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="empty"):
        GroupRelativeRubric(StepScore()).episode_return([])
    with pytest.raises(TypeError, match="pairs"):
        GroupRelativeRubric(StepScore()).episode_return([1, 2])  # type: ignore[list-item]


async def test_async_inner_rubric() -> None:
    class AsyncOutcome(ExponentialDiscountingTrajectoryRubric):
        async def score_trajectory(self, trajectory: list[Any]) -> float:
            await asyncio.sleep(0)
            return 1.0 if trajectory[-1][1].text == "win" else 0.0

    grader = GroupRelativeRubric(AsyncOutcome(), episode_reward="last")
    advantages = await grader.ascore_group([episode("win"), episode("lose"), 0.5])
    assert advantages == pytest.approx(group_relative_advantages([1.0, 0.0, 0.5]))
    assert grader.score_group([episode("win"), episode("lose")]) == pytest.approx(
        group_relative_advantages([1.0, 0.0])
    )


def test_group_rubric_is_not_a_step_rubric_and_has_state() -> None:
    grader = GroupRelativeRubric(Outcome(gamma=0.9), leave_one_out=True)
    with pytest.raises(NotImplementedError, match="score_group"):
        grader.forward(TextAction(), TextObservation())
    state = grader.state_dict()
    assert state["leave_one_out"] is True and state["rubric.gamma"] == 0.9
    other = GroupRelativeRubric(Outcome())
    other.load_state_dict(state)
    assert other.leave_one_out and other.rubric.gamma == 0.9
