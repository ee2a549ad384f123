"""Typed models of the maze environment."""

from __future__ import annotations

from pydantic import Field

from openenv.core.env_server.types import Action, Observation, State


class MazeAction(Action):
    """0 up, 1 down, 2 left, 3 right (up decreases the row)."""

    action: int = Field(ge=0, le=3)


class MazeObservation(Observation):
    """Positions are `[row, col]`; `grid` is one string per row: `#` wall, `.` open, `E` exit,
    `A` the agent."""

    position: list[int] = [0, 0]
    exit: list[int] = [0, 0]
    legal_actions: list[int] = []
    grid: list[str] = []
    #: what the last action did: "move", "revisit", "wall", "exit" ("" after reset)
    event: str = ""
    message: str = ""


class MazeState(State):
    seed: int | None = None
    size: int = 8
    generated: bool = False
    layout: list[str] = []
    position: list[int] = [0, 0]
    exit: list[int] = [0, 0]
    visited: int = 1
    wall_bumps: int = 0
    max_steps: int = 200
    total_reward: float = 0.0
    solved: bool = False
