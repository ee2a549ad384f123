"""Typed client of the reasoning gym environment."""

from __future__ import annotations

from openenv.core import EnvClient

from .models import ReasoningGymAction, ReasoningGymObservation, ReasoningGymState


class ReasoningGymEnv(EnvClient[ReasoningGymAction, ReasoningGymObservation, ReasoningGymState]):
    """`reset(dataset_name=..., seed=...)` for a question, `step(ReasoningGymAction(answer=...))`
    for its score; the reset options are in the README."""
