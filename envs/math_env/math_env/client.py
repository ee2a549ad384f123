"""Typed client of the math environment."""

from __future__ import annotations

from openenv.core import EnvClient

from .models import MathAction, MathObservation, MathState


class MathEnv(EnvClient[MathAction, MathObservation, MathState]):
    """`step(MathAction(answer="42"))`; `result.metadata["reward_components"]` has the parts."""
