"""Snake environment: pure-Python snake on a grid."""

from .client import SnakeEnv
from .models import SnakeAction, SnakeObservation, SnakeState

__all__ = ["SnakeAction", "SnakeEnv", "SnakeObservation", "SnakeState"]
