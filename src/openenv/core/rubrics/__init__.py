"""Rubrics: composable reward functions for environments.

See `openenv.core.rubrics.base` for the evaluation model (sync/async, hook order, errors).
The LLM judge's names are imported on first use: they bring an HTTP client (httpx, ~50 ms of a
server's start) that an environment without a judge never needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from openenv._lazy import lazy_exports

from .base import AwaitableScore, RemovableHandle, Rubric, RubricError, failed_rubric_path
from .containers import Gate, RubricDict, RubricList, Sequential, WeightedSum
from .group import GroupRelativeRubric, group_relative_advantages
from .trajectory import ExponentialDiscountingTrajectoryRubric, TrajectoryRubric

if TYPE_CHECKING:
    from .llm_judge import JudgeError, LLMJudge, ParsedScore, parse_score

_LAZY = dict.fromkeys(["JudgeError", "LLMJudge", "ParsedScore", "parse_score"], ".llm_judge")


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())

__all__ = [
    "AwaitableScore",
    "ExponentialDiscountingTrajectoryRubric",
    "Gate",
    "GroupRelativeRubric",
    "JudgeError",
    "LLMJudge",
    "ParsedScore",
    "RemovableHandle",
    "Rubric",
    "RubricDict",
    "RubricError",
    "RubricList",
    "Sequential",
    "TrajectoryRubric",
    "WeightedSum",
    "failed_rubric_path",
    "group_relative_advantages",
    "parse_score",
]
