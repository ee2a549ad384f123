"""Rubrics that score whole episodes instead of single steps.

A `TrajectoryRubric` records every step it is evaluated on and, when an observation with
``done=True`` arrives, scores the recorded trajectory with `score_trajectory`; before that each
step scores ``intermediate_reward``. `compute_step_rewards` then spreads the episode's outcome
over its steps for credit assignment (training code reads it after the episode).

The kept steps live in the list ``self._trajectory`` (OpenEnv's name, so subclasses written as
OpenEnv's documentation shows -- ``len(self._trajectory)``,
``self.score_trajectory(self._trajectory)``, ``self._trajectory = []`` in an own ``reset`` --
work unchanged).

Memory: by default a step is recorded as the ``(action, observation)`` pair, and all steps of
the episode are kept. Two independent knobs bound that:

* ``max_steps=N`` keeps only the last N recorded steps (older ones are dropped; `num_steps`
  still counts every step, so per-step rewards cover the whole episode);
* override `record` to store a compact summary of a step instead of the full pair (for
  example only the action, or a few numbers from the observation); `score_trajectory` then
  receives the summaries.

`score_trajectory` may be ``async def`` (e.g. an LLM judge over the transcript); the rubric is
then async.
"""

from __future__ import annotations

import inspect
import math
from abc import abstractmethod
from collections.abc import Mapping
from typing import Any

from .base import Rubric, is_async_callable

__all__ = ["ExponentialDiscountingTrajectoryRubric", "TrajectoryRubric"]


def _is_done(observation: Any) -> bool:
    if isinstance(observation, Mapping):
        return bool(observation.get("done", False))
    return bool(getattr(observation, "done", False))


def _check_max_steps(max_steps: Any) -> int | None:
    if max_steps is None:
        return None
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise ValueError(f"max_steps must be a positive int or None, got {max_steps!r}")
    return max_steps


class TrajectoryRubric(Rubric):
    """Score an episode when it ends; ``intermediate_reward`` for the steps before.

    Subclasses implement `score_trajectory` (may be ``async def``) and `compute_step_rewards`.
    Call `reset` between episodes (environments do so through ``Environment._reset_rubric``).
    """

    def __init__(self, intermediate_reward: float = 0.0, max_steps: int | None = None) -> None:
        super().__init__()
        self.intermediate_reward = float(intermediate_reward)
        self._max_steps = _check_max_steps(max_steps)
        self._trajectory = []

    # -- the kept steps ------------------------------------------------------------------

    @property
    def _trajectory(self) -> list[Any]:
        """The kept steps (the list itself, oldest first)."""
        return self.__dict__["_kept_steps"]

    @_trajectory.setter
    def _trajectory(self, steps: list[Any]) -> None:
        # Assigning a new list (OpenEnv subclasses reset this way) starts a new episode.
        self.__dict__["_kept_steps"] = steps
        self.__dict__["_dropped_steps"] = 0
        self.__dict__["_final_score"] = None

    # -- configuration -------------------------------------------------------------------

    @property
    def max_steps(self) -> int | None:
        """How many recorded steps are kept (the most recent ones); None keeps all."""
        return self._max_steps

    @max_steps.setter
    def max_steps(self, value: int | None) -> None:
        self._max_steps = _check_max_steps(value)
        self._trim()

    def _trim(self) -> None:
        steps = self._trajectory
        if self._max_steps is not None and len(steps) > self._max_steps:
            excess = len(steps) - self._max_steps
            del steps[:excess]
            self.__dict__["_dropped_steps"] += excess

    # -- recording -----------------------------------------------------------------------

    def record(self, action: Any, observation: Any) -> Any:
        """What to keep for one step; default ``(action, observation)``.

        Override to keep a compact summary instead (the summaries are what `trajectory`
        returns and what `score_trajectory` receives).
        """
        return (action, observation)

    @property
    def trajectory(self) -> list[Any]:
        """A copy of the kept steps, oldest first."""
        return list(self._trajectory)

    @property
    def num_steps(self) -> int:
        """Steps seen in this episode, including ones dropped because of ``max_steps``."""
        return self.__dict__["_dropped_steps"] + len(self._trajectory)

    @property
    def final_score(self) -> float | None:
        """The episode's score once a ``done`` observation was scored, else None."""
        return self._final_score

    @property
    def episode_done(self) -> bool:
        return self._final_score is not None

    # -- scoring -------------------------------------------------------------------------

    @abstractmethod
    def score_trajectory(self, trajectory: list[Any]) -> float:
        """Score a finished episode (the kept steps, see `record`). May be ``async def``."""

    @abstractmethod
    def compute_step_rewards(self) -> list[float]:
        """One reward per step of the finished episode (length `num_steps`)."""

    def _forward_is_async(self) -> bool:
        return super()._forward_is_async() or is_async_callable(self.score_trajectory)

    def forward(self, action: Any, observation: Any) -> Any:
        self._trajectory.append(self.record(action, observation))
        self._trim()
        if not _is_done(observation):
            return self.intermediate_reward
        result = self.score_trajectory(self.trajectory)
        if inspect.isawaitable(result):
            return self._finish_async(result)
        return self._finish(result)

    def _finish(self, result: Any) -> float:
        score = float(result)
        if not math.isfinite(score):
            raise ValueError(f"score_trajectory returned a non-finite score: {score}")
        self._final_score = score
        return score

    async def _finish_async(self, result: Any) -> float:
        return self._finish(await result)

    def reset(self) -> None:
        self._trajectory = []
        super().reset()

    # -- state ---------------------------------------------------------------------------

    def own_state_dict(self) -> dict[str, Any]:
        return {"intermediate_reward": self.intermediate_reward, "max_steps": self.max_steps}

    def load_own_state_dict(self, state: dict[str, Any]) -> None:
        if "intermediate_reward" in state:
            self.intermediate_reward = float(state["intermediate_reward"])
        if "max_steps" in state:
            self.max_steps = state["max_steps"]

    def extra_repr(self) -> str:
        return f"intermediate_reward={self.intermediate_reward}, max_steps={self.max_steps}"


def _check_gamma(gamma: Any) -> float:
    value = float(gamma)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma!r}")
    return value


class ExponentialDiscountingTrajectoryRubric(TrajectoryRubric):
    """Credit step ``t`` of a ``T``-step episode with ``R * gamma ** (T - 1 - t)``.

    ``R`` is the episode's `final_score`; the last step gets ``R`` in full and earlier steps
    geometrically less. Subclasses still implement `score_trajectory`.
    """

    def __init__(
        self,
        gamma: float = 0.99,
        intermediate_reward: float = 0.0,
        max_steps: int | None = None,
    ) -> None:
        super().__init__(intermediate_reward=intermediate_reward, max_steps=max_steps)
        self.gamma = _check_gamma(gamma)

    def compute_step_rewards(self) -> list[float]:
        """Discounted rewards for every step; [] before any step. Raises RuntimeError while
        the episode is still running (its outcome is not known yet)."""
        if self.num_steps == 0:
            return []
        if self._final_score is None:
            raise RuntimeError(
                "compute_step_rewards() needs a finished episode: no observation with "
                "done=True has been scored since the last reset()"
            )
        total = self.num_steps
        return [self._final_score * self.gamma ** (total - 1 - t) for t in range(total)]

    def own_state_dict(self) -> dict[str, Any]:
        return {**super().own_state_dict(), "gamma": self.gamma}

    def load_own_state_dict(self, state: dict[str, Any]) -> None:
        if "gamma" in state:
            self.gamma = _check_gamma(state["gamma"])
        super().load_own_state_dict(state)

    def extra_repr(self) -> str:
        return f"gamma={self.gamma}, {super().extra_repr()}"
