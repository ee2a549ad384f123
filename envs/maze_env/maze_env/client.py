"""Typed client of the maze environment."""

from __future__ import annotations

from openenv.core import EnvClient

from .models import MazeAction, MazeObservation, MazeState


class MazeEnv(EnvClient[MazeAction, MazeObservation, MazeState]):
    """`step(MazeAction(action=3))`; `reset(seed=..., size=...)` generates a random maze."""
