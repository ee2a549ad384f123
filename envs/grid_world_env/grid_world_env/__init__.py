"""Grid world environment: walk from the start to the goal of a small grid."""

from .client import GridWorldEnv
from .models import GridWorldAction, GridWorldObservation, GridWorldState

__all__ = ["GridWorldAction", "GridWorldEnv", "GridWorldObservation", "GridWorldState"]
