"""Maze environment: find the exit of a walled maze."""

from .client import MazeEnv
from .models import MazeAction, MazeObservation, MazeState

__all__ = ["MazeAction", "MazeEnv", "MazeObservation", "MazeState"]
