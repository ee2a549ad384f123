"""Math environment: the reference environment for composed rubrics."""

from .client import MathEnv
from .models import MathAction, MathObservation, MathState

__all__ = ["MathAction", "MathEnv", "MathObservation", "MathState"]
