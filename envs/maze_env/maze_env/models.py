"""Typed models of the maze environment.

OpenEnv's maze_env fields keep its names, types and defaults (`action`; `legal_actions`,
`current_position`, `previous_position` as `[col, row]`; `done`, `current_position`,
`exit_cell`, `status` in the state); the `[row, col]` fields and the rest are ours.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field

from openenv.core.env_server.types import Action, Observation, State


class MazeAction(Action):
    """0 up, 1 down, 2 left, 3 right (up decreases the row)."""

    #: the first moves of the default maze's path from its start, for checkers and tests
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"action": 3}, {"action": 3}, {"action": 1}]}
    )

    action: int = Field(ge=0, le=3)


class MazeObservation(Observation):
    """`position` and `exit` are `[row, col]`, `current_position` and `previous_position`
    `[col, row]` (OpenEnv's); `grid` is one string per row: `#` wall, `.` open, `E` exit,
    `A` the agent."""

    #: the moves that neither hit a wall nor leave the maze (empty once the episode is over)
    legal_actions: list[int] = Field(default_factory=list)
    current_position: list[int] = Field(default_factory=list)
    #: where the agent was before the last action (the start cell after reset)
    previous_position: list[int] = Field(default_factory=list)
    position: list[int] = [0, 0]
    exit: list[int] = [0, 0]
    grid: list[str] = []
    #: what the last action did: "move", "revisit", "wall", "exit" ("" after reset)
    event: str = ""
    #: "playing", "win" (the exit is reached) or "lose" (the penalties passed the limit)
    status: str = "playing"
    message: str = ""


class MazeState(State):
    done: bool = False
    #: `[col, row]`, like `exit_cell`
    current_position: list[int] = Field(default_factory=list)
    exit_cell: list[int] = Field(default_factory=list)
    status: str = "playing"
    seed: int | None = None
    size: int = 8
    generated: bool = False
    layout: list[str] = []
    position: list[int] = [0, 0]
    exit: list[int] = [0, 0]
    visited: int = 1
    wall_bumps: int = 0
    max_steps: int | None = None
    total_reward: float = 0.0
    solved: bool = False
