"""Typed models of the chess environment."""

from __future__ import annotations

from typing import Literal

from openenv.core.env_server.types import Action, Observation, State

Color = Literal["white", "black"]


class ChessAction(Action):
    """The agent's move in UCI notation, e.g. `e2e4`, `g1f3`, `e7e8q` (promotion)."""

    move: str


class ChessObservation(Observation):
    fen: str = ""
    #: the game so far as PGN (headers and moves)
    pgn: str = ""
    #: the agent's legal moves in UCI (empty when the game is over)
    legal_moves: list[str] = []
    last_opponent_move: str | None = None
    agent_color: Color = "white"
    #: "1-0", "0-1", "1/2-1/2", or "*" while the game goes on (or when it was cut)
    result: str = "*"
    #: why the game ended: "checkmate", "stalemate", "insufficient_material",
    #: "threefold_repetition", "fifty_moves", "illegal_move", "max_moves", ... (None while on)
    termination: str | None = None
    #: True when the last move was illegal and was rejected
    illegal_move: bool = False
    message: str = ""


class ChessState(State):
    seed: int | None = None
    fen: str = ""
    start_fen: str = ""
    agent_color: Color = "white"
    opponent: str = "random"
    #: UCI moves of both sides since the start position
    moves: list[str] = []
    agent_moves: int = 0
    illegal_moves: int = 0
    illegal_move_policy: Literal["penalize", "lose"] = "penalize"
    illegal_move_penalty: float = -1.0
    max_moves: int | None = None
    result: str = "*"
    termination: str | None = None
