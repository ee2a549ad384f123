"""Chess environment: play UCI moves against a built-in opponent (python-chess)."""

from .client import ChessEnv
from .models import ChessAction, ChessObservation, ChessState

__all__ = ["ChessAction", "ChessEnv", "ChessObservation", "ChessState"]
