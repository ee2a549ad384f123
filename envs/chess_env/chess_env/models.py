"""Typed models of the chess environment.

The fields OpenEnv's chess_env has (`move`; `fen`, `legal_moves`, `is_check`, `result`;
`fen`, `current_player`, `move_history`) keep its names, types and defaults; the rest are ours.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict

from openenv.core.env_server.types import Action, Observation, State

Color = Literal["white", "black"]


class ChessAction(Action):
    """The agent's move in UCI notation, e.g. `e2e4`, `g1f3`, `e7e8q` (promotion)."""

    #: legal opening moves for white (the agent's default colour), for checkers and tests
    model_config = ConfigDict(json_schema_extra={"examples": [{"move": "e2e4"}, {"move": "g1f3"}]})

    move: str


class ChessObservation(Observation):
    fen: str = ""
    #: the game so far as PGN (headers and moves)
    pgn: str = ""
    #: the agent's legal moves in UCI (empty when the game is over)
    legal_moves: list[str] = []
    #: True when the side to move (the agent, while the game goes on) is in check
    is_check: bool = False
    last_opponent_move: str | None = None
    agent_color: Color = "white"
    #: "1-0", "0-1" or "1/2-1/2" once the game is over (a game cut at max_moves is a draw);
    #: None while it goes on
    result: str | None = None
    #: why the game ended: "checkmate", "stalemate", "insufficient_material",
    #: "threefold_repetition", "fifty_moves", "illegal_move", "max_moves", ... (None while on)
    termination: str | None = None
    #: True when the last move was illegal and was rejected
    illegal_move: bool = False
    message: str = ""


class ChessState(State):
    """`step_count` counts `step()` calls (rejected moves too); `move_history` holds the moves
    of both sides."""

    seed: int | None = None
    fen: str = ""
    #: the side to move
    current_player: Color = "white"
    #: UCI moves of both sides since the start position (OpenEnv's name for `moves`)
    move_history: list[str] = []
    start_fen: str = ""
    agent_color: Color = "white"
    opponent: str = "random"
    #: UCI moves of both sides since the start position
    moves: list[str] = []
    agent_moves: int = 0
    illegal_moves: int = 0
    illegal_move_policy: Literal["penalize", "lose"] = "penalize"
    illegal_move_penalty: float = -0.1
    max_moves: int | None = None
    #: the PGN result: "*" while the game goes on and for a game cut at max_moves
    result: str = "*"
    termination: str | None = None
