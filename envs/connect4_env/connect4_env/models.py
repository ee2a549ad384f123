"""Typed models of the Connect Four environment.

OpenEnv's connect4_env fields keep its names, types and defaults (`column`; `board`,
`legal_actions`; `board`, `next_player`); the rest are ours. The board is 6 rows by 7 columns,
row 0 at the top: 1 is a disc of the agent (of the first player without an opponent), -1 one of
the opponent, 0 an empty cell.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from openenv.core.env_server.types import Action, Observation, State

ROWS, COLUMNS = 6, 7
Opponent = Literal["greedy", "random", "none"]


def empty_board() -> list[list[int]]:
    return [[0] * COLUMNS for _ in range(ROWS)]


class Connect4Action(Action):
    """The column (0 to 6) to drop a disc into. A column outside the board or already full is
    an invalid move: it loses the game (OpenEnv's rule)."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"column": 3}, {"column": 3}, {"column": 2}]}
    )

    column: int


class Connect4Observation(Observation):
    board: list[list[int]] = Field(default_factory=list)
    #: the columns that are not full (empty once the game is over)
    legal_actions: list[int] = Field(default_factory=list)
    #: the column the opponent dropped its disc into after the agent's move (or first)
    last_opponent_move: int | None = None
    #: "win", "loss", "draw" or "invalid_move" once the game is over; None while it goes on
    result: str | None = None
    message: str = ""


class Connect4State(State):
    board: list[list[int]] = Field(default_factory=empty_board)
    #: who drops the next disc: 1 (the agent, or the first player) or -1
    next_player: int = 1
    seed: int | None = None
    opponent: Opponent = "greedy"
    agent_first: bool = True
    #: the columns played by both sides, in order
    moves: list[int] = []
    result: str | None = None
