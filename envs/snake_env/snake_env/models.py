"""Typed models of the snake environment.

A superset of OpenEnv's `snake_env` models: OpenEnv's `action` (an int) and its observation
fields (`grid` of cell codes, the `observation` tensor, `episode_*` counters, `alive`), plus this
package's readable fields (`board`, `head`, `fruit`, `event`, ...)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from openenv.core.env_server.types import Action, Observation, State

Direction = Literal["UP", "DOWN", "LEFT", "RIGHT"]
Observer = Literal["snake", "human"]


class SnakeAction(Action):
    """`action`: with the default `snake` observer a relative turn (0 straight on, 1 turn left,
    2 turn right); with the `human` observer a heading (0 keep going, 1 left, 2 right, 3 down,
    4 up). `direction`, when given, is an absolute heading and overrides `action`. Turning
    straight back onto the body is ignored."""

    action: int = Field(default=0, ge=0, le=4)
    direction: Direction | None = None


class SnakeObservation(Observation):
    """Positions are `[row, col]` in `grid` (row 0 and column 0 are the wall)."""

    # -- OpenEnv's fields ------------------------------------------------------------------
    #: the whole board with its wall, one code per cell: 0 empty, 1 fruit, 2 wall, 3 the
    #: snake's tail, 4 its body, 5 its head
    grid: list[list[int]] = Field(default_factory=list)
    #: the encoded board, height x width x 8 channels of 0/1: fruit, wall, three channels for
    #: other snakes (always 0 here), own tail, own body, own head; a (2r+1) x (2r+1) window
    #: around the head with `vision_range=r`
    observation: list[list[list[float]]] = Field(default_factory=list)
    #: the sum of this episode's rewards
    episode_score: float = 0.0
    episode_steps: int = 0
    episode_fruits: int = 0
    #: always 0: there is one snake
    episode_kills: int = 0
    alive: bool = True
    # -- this package's fields -------------------------------------------------------------
    #: the board as text, one string per row: `#` wall, `.` empty, `H` head, `o` body, `*` fruit
    board: list[str] = Field(default_factory=list)
    score: int = 0
    length: int = 0
    direction: Direction = "RIGHT"
    head: list[int] = Field(default_factory=list)
    fruit: list[int] | None = None
    width: int = 20
    height: int = 20
    #: what the last step did: "move", "fruit", "death", "win", "timeout" ("" after reset)
    event: str = ""
    message: str = ""


class SnakeState(State):
    seed: int | None = None
    width: int = 20
    height: int = 20
    observer: Observer = "snake"
    score: int = 0
    direction: Direction = "RIGHT"
    #: the snake's cells, head first
    snake: list[list[int]] = Field(default_factory=list)
    fruit: list[int] | None = None
    alive: bool = True
    max_steps: int = 1000
    total_reward: float = 0.0
