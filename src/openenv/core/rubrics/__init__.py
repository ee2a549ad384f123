"""Rubrics: composable reward functions for environments.

See `openenv.core.rubrics.base` for the evaluation model (sync/async, hook order, errors).
"""

from __future__ import annotations

from .base import AwaitableScore, RemovableHandle, Rubric, RubricError, failed_rubric_path
from .containers import Gate, RubricDict, RubricList, Sequential, WeightedSum
from .group import GroupRelativeRubric, group_relative_advantages
from .llm_judge import JudgeError, LLMJudge, ParsedScore, parse_score
from .trajectory import ExponentialDiscountingTrajectoryRubric, TrajectoryRubric

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
