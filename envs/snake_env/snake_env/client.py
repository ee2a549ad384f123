"""Typed client of the snake environment."""

from __future__ import annotations

from openenv.core import EnvClient

from .models import SnakeAction, SnakeObservation, SnakeState


class SnakeEnv(EnvClient[SnakeAction, SnakeObservation, SnakeState]):
    """`step(SnakeAction(action=1))` turns left; `step(SnakeAction(direction="UP"))` heads up.

    Results parse into `SnakeObservation` (OpenEnv's `grid`, `observation`, `episode_*`,
    `alive` included) and `state()` into `SnakeState`."""
