"""Typed models of the TextArena environment."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from openenv.core.env_server.types import Action, Observation, State


class TextArenaAction(Action):
    """What the agent says, e.g. `"I will try [crane]"`: the game reads the move in brackets."""

    # Legal sample actions for the checkers: Wordle guesses (docs/testing.md).
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"message": f"[{w}]"} for w in ("crane", "about", "water")]}
    )

    message: str


class TextArenaMessage(BaseModel):
    """One chat message: `user` is the game talking, `assistant` the agent's past actions."""

    role: Literal["system", "user", "assistant"]
    content: str


class TextArenaObservation(Observation):
    env_id: str = ""
    #: the text the current player sees now (game rules, history, feedback)
    prompt: str = ""
    #: the conversation so far, chat style (ready for a chat template)
    messages: list[TextArenaMessage] = Field(default_factory=list)
    current_player_id: int = 0
    #: final reward per player id (empty until the game is over)
    rewards: dict[int, float] = Field(default_factory=dict)
    #: game-specific details, e.g. Wordle's feedback pattern and guesses left
    info: dict[str, Any] = Field(default_factory=dict)


class TextArenaState(State):
    env_id: str = ""
    seed: int | None = None
    #: "builtin" (the offline Wordle of this package) or "textarena"
    backend: str = "builtin"
    num_players: int = 1
    current_player_id: int = 0
    done: bool = False
    rewards: dict[int, float] = Field(default_factory=dict)
    total_reward: float = 0.0
