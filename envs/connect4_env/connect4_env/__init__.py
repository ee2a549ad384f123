"""Connect Four environment: drop discs into a 6x7 board against a built-in opponent."""

from .client import Connect4Env
from .models import Connect4Action, Connect4Observation, Connect4State

__all__ = ["Connect4Action", "Connect4Env", "Connect4Observation", "Connect4State"]
