"""Typed client of the Gymnasium environment."""

from __future__ import annotations

from openenv.core import EnvClient

from .models import GymnasiumAction, GymnasiumObservation, GymnasiumState


class GymnasiumEnv(EnvClient[GymnasiumAction, GymnasiumObservation, GymnasiumState]):
    """`reset(seed=0)` or `reset(env_id="FrozenLake-v1", env_kwargs={...}, seed=0)`, then
    `step(GymnasiumAction(action=1))`; `result.observation.action_space` describes the actions."""
