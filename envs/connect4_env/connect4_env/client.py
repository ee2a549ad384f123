"""Typed client of the Connect Four environment."""

from __future__ import annotations

from openenv.core import EnvClient

from .models import Connect4Action, Connect4Observation, Connect4State


class Connect4Env(EnvClient[Connect4Action, Connect4Observation, Connect4State]):
    """`reset(seed=..., opponent="greedy", agent_first=True)`, then
    `step(Connect4Action(column=3))`."""
