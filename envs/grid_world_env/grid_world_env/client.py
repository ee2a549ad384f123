"""Typed client of the grid world environment."""

from __future__ import annotations

from openenv.core import EnvClient

from .models import GridWorldAction, GridWorldObservation, GridWorldState


class GridWorldEnv(EnvClient[GridWorldAction, GridWorldObservation, GridWorldState]):
    """`step(GridWorldAction(direction="RIGHT"))`; `reset(seed=..., random_start=True)`."""
