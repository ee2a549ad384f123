"""Typed models of the snake environment."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from openenv.core.env_server.types import Action, Observation, State

Direction = Literal["UP", "DOWN", "LEFT", "RIGHT"]


class SnakeAction(Action):
    """A relative turn (`action`: 0 straight on, 1 turn left, 2 turn right) or, when
    `direction` is given, an absolute heading (turning back onto the body is ignored)."""

    action: int = Field(default=0, ge=0, le=2)
    direction: Direction | None = None


class SnakeObservation(Observation):
    """`grid` is one string per row: `.` empty, `H` head, `o` body, `*` fruit.
    Positions are `[row, col]`."""

    grid: list[str] = []
    score: int = 0
    length: int = 0
    direction: Direction = "RIGHT"
    head: list[int] = []
    fruit: list[int] | None = None
    width: int = 10
    height: int = 10
    #: what the last step did: "move", "fruit", "death", "win", "timeout" ("" after reset)
    event: str = ""
    message: str = ""


class SnakeState(State):
    seed: int | None = None
    width: int = 10
    height: int = 10
    score: int = 0
    direction: Direction = "RIGHT"
    #: the snake's cells, head first
    snake: list[list[int]] = []
    fruit: list[int] | None = None
    alive: bool = True
    max_steps: int = 1000
    total_reward: float = 0.0
