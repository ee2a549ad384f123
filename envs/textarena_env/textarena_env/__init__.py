"""TextArena environment: text games (Wordle built in) played with chat-style messages."""

from .client import TextArenaEnv
from .models import TextArenaAction, TextArenaMessage, TextArenaObservation, TextArenaState
from .rewards import RewardProvider, build_reward_providers

__all__ = [
    "RewardProvider",
    "TextArenaAction",
    "TextArenaEnv",
    "TextArenaMessage",
    "TextArenaObservation",
    "TextArenaState",
    "build_reward_providers",
]
