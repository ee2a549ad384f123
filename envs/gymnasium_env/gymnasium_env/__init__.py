"""Gymnasium environment: any registered Gymnasium id, served with typed spaces."""

from .client import GymnasiumEnv
from .models import GymnasiumAction, GymnasiumObservation, GymnasiumState

__all__ = ["GymnasiumAction", "GymnasiumEnv", "GymnasiumObservation", "GymnasiumState"]
