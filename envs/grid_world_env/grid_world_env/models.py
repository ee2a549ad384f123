"""Typed models of the grid world environment.

OpenEnv's grid_world_env fields keep its names, types and defaults (`MoveAction`,
`GridWorldAction.action`; `x`, `y`, `suggested_action`, `message`; the `agent_*`, `goal_*`,
`grid_size`, `episode_steps` of `GridWorldState`); `direction`, `position`, `goal`, ... are ours.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from pydantic import ConfigDict, model_validator

from openenv.core.env_server.types import Action, Observation, State


class MoveAction(str, Enum):
    UP = "UP"
    DOWN = "DOWN"
    LEFT = "LEFT"
    RIGHT = "RIGHT"


class GridWorldAction(Action):
    """One move; UP decreases the row, LEFT decreases the column.

    `action` is OpenEnv's name, `direction` ours: give either (both must then agree); the
    model carries the move in both."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"action": "RIGHT"}, {"action": "DOWN"}]}
    )

    action: MoveAction | None = None
    direction: MoveAction | None = None

    @model_validator(mode="before")
    @classmethod
    def _fill_both(cls, data: Any) -> Any:
        if isinstance(data, dict):
            if data.get("action") is None and data.get("direction") is not None:
                data = {**data, "action": data["direction"]}
            elif data.get("direction") is None and data.get("action") is not None:
                data = {**data, "direction": data["action"]}
        return data

    @model_validator(mode="after")
    def _one_move(self) -> GridWorldAction:
        if self.action is None:
            raise ValueError("give the move as action= (or direction=): UP, DOWN, LEFT or RIGHT")
        if self.action != self.direction:
            raise ValueError(f"action={self.action.value} and direction={self.direction} disagree")
        return self


class GridWorldObservation(Observation):
    """`x` is the row and `y` the column (OpenEnv's); `position` is `[row, col]`. The start is
    `[0, 0]` and the goal `[size-1, size-1]`."""

    x: int = 0
    y: int = 0
    #: always None here, as in OpenEnv (kept for its schema)
    suggested_action: MoveAction | None = None
    message: str = ""
    position: list[int] = [0, 0]
    goal: list[int] = [4, 4]
    size: int = 5
    #: True when the last move hit the border and the agent stayed put
    bumped: bool = False


class GridWorldState(State):
    agent_x: int = 0
    agent_y: int = 0
    goal_x: int = 0
    goal_y: int = 0
    grid_size: int = 0
    #: moves made in this episode (the same as `step_count`)
    episode_steps: int = 0
    seed: int | None = None
    size: int = 5
    position: list[int] = [0, 0]
    goal: list[int] = [4, 4]
    random_start: bool = False
    max_steps: int | None = None
    total_reward: float = 0.0
    reached_goal: bool = False
