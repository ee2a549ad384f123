"""The server side of rewards: score each step with the environment's rubric.

An environment given `rubric=` needs no reward code: after every step the server scores the
action and observation with the rubric (sync or async, on either code path) and sets
`observation.reward`, unless the step already did so through `_apply_rubric`. The observation's
metadata then carries what the trainer needs to see:

- `reward_components`: `{dot.path: score}` of every named rubric in the tree that scored;
- `step_rewards` (when the episode ends): per-step rewards of each trajectory rubric,
  keyed by its path (`""` for the root).

A rubric that fails raises `RewardError` (wire code `REWARD_ERROR`): never a reward of 0.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..errors import RewardError
from .types import Observation

if TYPE_CHECKING:
    from .interfaces import Environment


def _reward_error(exc: BaseException) -> RewardError:
    """The typed error a failed rubric becomes on the wire (never a reward of 0)."""
    from openenv.core.llm_client import LLMUnavailableError
    from openenv.core.rubrics import RubricError, failed_rubric_path

    path = failed_rubric_path(exc) or ""
    # An error this package raises about a rubric may carry the underlying failure.
    cause = (exc.cause if isinstance(exc, RubricError) else None) or exc
    unavailable = isinstance(exc, LLMUnavailableError) or isinstance(cause, LLMUnavailableError)
    return RewardError(
        f"Rubric {path or '<root>'} failed: {type(exc).__name__}: {exc}",
        rubric_path=path,
        exception=type(cause).__name__,
        # A judge whose LLM endpoint is down is not the environment's fault.
        category="infrastructure" if unavailable else "environment",
    )


async def reset_rubric(env: Any) -> None:
    rubric = getattr(env, "rubric", None)
    if rubric is None:
        return
    try:
        await rubric.reset_async()
    except Exception as exc:
        raise _reward_error(exc) from exc


async def score_step(
    env: Environment,
    action: Any,
    obs: Observation,
    run_sync: Callable[[Callable[[], Any]], Awaitable[Any]],
) -> None:
    """Score one step with `env.rubric` and annotate the observation (see module docstring)."""
    from openenv.core.rubrics import Rubric

    rubric = getattr(env, "rubric", None)
    if rubric is None:
        return
    try:
        if env._rubric_scored:
            env._rubric_scored = False  # the step applied the rubric itself
        elif rubric.is_async:
            obs.reward = await Rubric.ascore(rubric, action, obs)
        else:
            # Called on the class: a rubric may keep its own `score` attribute (OpenEnv style).
            obs.reward = await run_sync(lambda: Rubric.score(rubric, action, obs))
    except Exception as exc:
        raise _reward_error(exc) from exc
    extra: dict[str, Any] = {}
    components = rubric.component_scores()
    if components:
        extra["reward_components"] = components
    if obs.done:
        step_rewards = trajectory_rewards(rubric)
        if step_rewards:
            extra["step_rewards"] = step_rewards
    if extra:
        obs.metadata = {**obs.metadata, **extra}


def trajectory_rewards(rubric: Any) -> dict[str, list[float]]:
    """Per-step rewards of every finished trajectory rubric in the tree, by path."""
    from openenv.core.rubrics import TrajectoryRubric

    out: dict[str, list[float]] = {}
    for path, node in [("", rubric), *rubric.named_rubrics()]:
        if isinstance(node, TrajectoryRubric) and node.episode_done:
            out[path] = list(node.compute_step_rewards())
    return out
