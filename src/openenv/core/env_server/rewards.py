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
    from openenv.core.llm_client import LLMUnavailableError

    cause = getattr(exc, "cause", None) or exc.__cause__
    path = getattr(exc, "path", "")
    return RewardError(
        f"Rubric {path or '<root>'} failed: {cause or exc}",
        rubric_path=path,
        exception=type(cause or exc).__name__,
        # A judge whose LLM endpoint is down is not the environment's fault.
        category="infrastructure" if isinstance(cause, LLMUnavailableError) else "environment",
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
    rubric = getattr(env, "rubric", None)
    if rubric is None:
        return
    try:
        if env._rubric_scored:
            env._rubric_scored = False  # the step applied the rubric itself
        elif rubric.is_async:
            obs.reward = await rubric.ascore(action, obs)
        else:
            obs.reward = await run_sync(lambda: rubric.score(action, obs))
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
