"""Typed client of the chess environment."""

from __future__ import annotations

from openenv.core import EnvClient

from .models import ChessAction, ChessObservation, ChessState


class ChessEnv(EnvClient[ChessAction, ChessObservation, ChessState]):
    """`reset(opponent="greedy", agent_color="black", fen=...)`, then
    `step(ChessAction(move="e2e4"))`."""
