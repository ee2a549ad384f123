"""Typed models of the grid world environment."""

from __future__ import annotations

from typing import Literal

from openenv.core.env_server.types import Action, Observation, State

Direction = Literal["UP", "DOWN", "LEFT", "RIGHT"]


class GridWorldAction(Action):
    """One move; UP decreases the row, LEFT decreases the column."""

    direction: Direction


class GridWorldObservation(Observation):
    """Positions are `[row, col]`; the start is `[0, 0]` and the goal `[size-1, size-1]`."""

    position: list[int] = [0, 0]
    goal: list[int] = [4, 4]
    size: int = 5
    #: True when the last move hit the border and the agent stayed put
    bumped: bool = False
    message: str = ""


class GridWorldState(State):
    seed: int | None = None
    size: int = 5
    position: list[int] = [0, 0]
    goal: list[int] = [4, 4]
    random_start: bool = False
    max_steps: int = 100
    total_reward: float = 0.0
    reached_goal: bool = False
