"""Reasoning gym environment: the `reasoning-gym` package's procedural tasks, scored by their
own verifiers."""

from .client import ReasoningGymEnv
from .models import ReasoningGymAction, ReasoningGymObservation, ReasoningGymState

__all__ = [
    "ReasoningGymAction",
    "ReasoningGymEnv",
    "ReasoningGymObservation",
    "ReasoningGymState",
]
