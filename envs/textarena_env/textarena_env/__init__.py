"""TextArena environment: text games (Wordle built in) played with chat-style messages."""

from .client import TextArenaEnv
from .models import TextArenaAction, TextArenaMessage, TextArenaObservation, TextArenaState

__all__ = [
    "TextArenaAction",
    "TextArenaEnv",
    "TextArenaMessage",
    "TextArenaObservation",
    "TextArenaState",
]
