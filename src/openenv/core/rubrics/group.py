"""Group-relative scoring: rate several episodes of the same task against each other.

GRPO-style training samples a *group* of episodes for one task and uses each episode's reward
relative to the group as its advantage::

    advantage_i = (r_i - baseline_i) / (std(r) + eps)

where ``baseline_i`` is the group mean, or with ``leave_one_out`` the mean of the *other*
episodes (RLOO), and the division is skipped with ``normalize_std=False`` (as in Dr. GRPO).
``std`` is the population standard deviation (``ddof=0``); pass ``ddof=1`` for the sample
standard deviation that e.g. ``torch.std`` uses by default.

This works client side on recorded episodes: `GroupRelativeRubric` takes final rewards
directly, or replays recorded ``(action, observation)`` trajectories through an inner rubric
to get each episode's reward first.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, Union

from .base import Rubric

__all__ = ["GroupRelativeRubric", "group_relative_advantages"]

Trajectory = Sequence[tuple[Any, Any]]
Episode = Union[float, Trajectory]
Aggregate = Union[Literal["sum", "last", "mean"], Callable[[list[float]], float]]


def group_relative_advantages(
    rewards: Iterable[float],
    *,
    normalize_std: bool = True,
    leave_one_out: bool = False,
    eps: float = 1e-6,
    ddof: int = 0,
) -> list[float]:
    """Advantages of a group of episode rewards relative to each other (see module doc).

    A group of one has advantage 0 (nothing to compare with); an empty group gives [].
    """
    values = [float(r) for r in rewards]
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"rewards must be finite, got {values}")
    if eps < 0:
        raise ValueError("eps must be >= 0")
    if ddof not in (0, 1):
        raise ValueError("ddof must be 0 or 1")
    count = len(values)
    if count < 2:
        return [0.0] * count
    total = sum(values)
    mean = total / count
    if leave_one_out:
        advantages = [v - (total - v) / (count - 1) for v in values]
    else:
        advantages = [v - mean for v in values]
    if normalize_std:
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / (count - ddof))
        advantages = [a / (std + eps) for a in advantages]
    return advantages


def _aggregate(name_or_fn: Aggregate) -> Callable[[list[float]], float]:
    if callable(name_or_fn):
        return name_or_fn
    if name_or_fn == "sum":
        return lambda scores: float(sum(scores))
    if name_or_fn == "last":
        return lambda scores: scores[-1]
    if name_or_fn == "mean":
        return lambda scores: sum(scores) / len(scores)
    raise ValueError(
        f"episode_reward must be 'sum', 'last', 'mean' or a callable, got {name_or_fn!r}"
    )


class GroupRelativeRubric(Rubric):
    """Turn a group of episodes of one task into group-relative advantages.

    Each episode is either a number (its reward) or a recorded trajectory: a sequence of
    ``(action, observation)`` pairs that is replayed through ``rubric`` (reset first, then
    evaluated step by step) and reduced with ``episode_reward``: ``"sum"`` (the return, the
    default), ``"last"`` (the score at the final step, e.g. a `TrajectoryRubric`'s outcome),
    ``"mean"`` or a callable taking the list of step scores.

    It scores groups, not steps: use `score_group` / `ascore_group`; calling it on a single
    step raises. After scoring, ``last_rewards`` and ``last_advantages`` hold the results.
    """

    def __init__(
        self,
        rubric: Rubric | None = None,
        *,
        normalize_std: bool = True,
        leave_one_out: bool = False,
        eps: float = 1e-6,
        ddof: int = 0,
        episode_reward: Aggregate = "sum",
    ) -> None:
        super().__init__()
        if rubric is not None:
            if not isinstance(rubric, Rubric):
                raise TypeError(f"rubric must be a Rubric, got {type(rubric).__name__}")
            self.rubric = rubric
        self.normalize_std = normalize_std
        self.leave_one_out = leave_one_out
        self.eps = float(eps)
        self.ddof = ddof
        self.episode_reward = episode_reward
        self._reduce = _aggregate(episode_reward)
        group_relative_advantages([0.0, 1.0], eps=self.eps, ddof=self.ddof)  # validate options
        self.last_rewards: list[float] = []
        self.last_advantages: list[float] = []

    def forward(self, action: Any, observation: Any) -> float:
        raise NotImplementedError(
            "GroupRelativeRubric scores groups of episodes, not single steps: use "
            "score_group(episodes) or await ascore_group(episodes)"
        )

    # -- one episode -----------------------------------------------------------------------

    def _inner(self) -> Rubric:
        inner = self.__dict__["_rubric_children"].get("rubric")
        if inner is None:
            raise ValueError(
                "this GroupRelativeRubric has no inner rubric, so episodes must be given as "
                "numbers (rewards), not trajectories"
            )
        return inner

    @staticmethod
    def _steps(trajectory: Any) -> list[tuple[Any, Any]]:
        steps = list(trajectory)
        if not steps:
            raise ValueError("cannot score an empty trajectory")
        for step in steps:
            if not isinstance(step, (tuple, list)) or len(step) != 2:
                raise TypeError(
                    f"a trajectory must be a sequence of (action, observation) pairs, got {step!r}"
                )
        return steps

    def episode_return(self, episode: Episode) -> float:
        """The reward of one episode: the number itself, or its replayed trajectory's."""
        if isinstance(episode, numbers.Real):
            return float(episode)
        inner, steps = self._inner(), self._steps(episode)
        inner.reset()
        return float(self._reduce([float(inner._evaluate(a, o)) for a, o in steps]))

    async def aepisode_return(self, episode: Episode) -> float:
        """Async `episode_return` (awaits async inner rubrics such as LLM judges)."""
        if isinstance(episode, numbers.Real):
            return float(episode)
        inner, steps = self._inner(), self._steps(episode)
        await inner.reset_async()
        return float(self._reduce([await inner._aevaluate(a, o) for a, o in steps]))

    # -- a group ---------------------------------------------------------------------------

    def advantages(self, rewards: Iterable[float]) -> list[float]:
        """Group-relative advantages of ``rewards`` with this rubric's options."""
        return group_relative_advantages(
            rewards,
            normalize_std=self.normalize_std,
            leave_one_out=self.leave_one_out,
            eps=self.eps,
            ddof=self.ddof,
        )

    def score_group(self, episodes: Iterable[Episode]) -> list[float]:
        """Advantages of a group of episodes (numbers or trajectories), in order."""
        rewards = [self.episode_return(episode) for episode in episodes]
        return self._finish(rewards)

    async def ascore_group(self, episodes: Iterable[Episode]) -> list[float]:
        """Async `score_group`. Trajectories are replayed one after another (the inner rubric
        keeps per-episode state)."""
        rewards = [await self.aepisode_return(episode) for episode in episodes]
        return self._finish(rewards)

    def _finish(self, rewards: list[float]) -> list[float]:
        advantages = self.advantages(rewards)
        self.last_rewards = rewards
        self.last_advantages = advantages
        return list(advantages)

    # -- state -----------------------------------------------------------------------------

    def own_state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "normalize_std": self.normalize_std,
            "leave_one_out": self.leave_one_out,
            "eps": self.eps,
            "ddof": self.ddof,
        }
        if isinstance(self.episode_reward, str):
            state["episode_reward"] = self.episode_reward
        return state

    def load_own_state_dict(self, state: dict[str, Any]) -> None:
        if "episode_reward" in state:
            self._reduce = _aggregate(state["episode_reward"])
            self.episode_reward = state["episode_reward"]
        eps = float(state.get("eps", self.eps))
        ddof = int(state.get("ddof", self.ddof))
        group_relative_advantages([0.0, 1.0], eps=eps, ddof=ddof)
        self.eps, self.ddof = eps, ddof
        if "normalize_std" in state:
            self.normalize_std = bool(state["normalize_std"])
        if "leave_one_out" in state:
            self.leave_one_out = bool(state["leave_one_out"])

    def extra_repr(self) -> str:
        return (
            f"normalize_std={self.normalize_std}, leave_one_out={self.leave_one_out}, "
            f"episode_reward={self.episode_reward!r}"
        )
