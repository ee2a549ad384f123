"""Evaluations: a model or agent over an environment's task set, one result per task and an
aggregate (mean reward, success rate, infrastructure failures counted apart, never as 0).

`EnvEvalHarness` drives a served environment with an OpenAI- or Anthropic-compatible model;
`openenv.evals.inspect` (extra ``evals``) makes an environment an Inspect AI task. Names load
on first use: importing this package does not import an HTTP stack or Inspect.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from openenv._lazy import lazy_exports

if TYPE_CHECKING:
    from .base import (
        EvalHarness,
        EvalReport,
        EvalTask,
        TaskResult,
        TaskSpec,
        TaskStatus,
        classify_failure,
        normalize_tasks,
    )
    from .env_harness import EnvEvalHarness
    from .episode import ACTION_TOOL, EnvEpisode, RewardMode, episode_reward
    from .tasks import known_tasks

_LAZY = {
    "EvalHarness": ".base",
    "EvalReport": ".base",
    "EvalTask": ".base",
    "TaskResult": ".base",
    "TaskSpec": ".base",
    "TaskStatus": ".base",
    "classify_failure": ".base",
    "normalize_tasks": ".base",
    "EnvEvalHarness": ".env_harness",
    "ACTION_TOOL": ".episode",
    "EnvEpisode": ".episode",
    "RewardMode": ".episode",
    "episode_reward": ".episode",
    "known_tasks": ".tasks",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
