"""Typed models of the TextArena environment.

A superset of OpenEnv's `textarena_env` models: OpenEnv's messages (`sender_id`, `content`,
`category`), `legal_players`, `info`, and its state fields (`max_turns`, `turn`, `last_reward`,
`last_info`, `raw_state`), plus this package's chat `role`s, per-player `rewards` and
bookkeeping."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from openenv.core.env_server.types import Action, Observation, State

#: TextArena's id of the game itself as a sender
GAME_ID = -1


class TextArenaAction(Action):
    """What the agent says, e.g. `"I will try [crane]"`: the game reads the move in brackets."""

    # Legal sample actions for the checkers: Wordle guesses (docs/testing.md).
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"message": f"[{w}]"} for w in ("crane", "about", "water")]}
    )

    message: str


class TextArenaMessage(BaseModel):
    """One message: `sender_id` (-1 the game, else a player), `category` (TextArena's
    observation type: `PROMPT`, `PLAYER_ACTION`, `GAME_MESSAGE`, `GAME_ADMIN`, ...) and the chat
    `role` (`user` the game, `assistant` the agent's own moves)."""

    sender_id: int = GAME_ID
    content: str
    category: str = "MESSAGE"
    role: Literal["system", "user", "assistant"] = "user"

    @model_validator(mode="before")
    @classmethod
    def _role_from_category(cls, data: Any) -> Any:
        """Messages built the OpenEnv way (no role) get one: the agent's moves are `assistant`."""
        if isinstance(data, dict) and "role" not in data:
            moved = data.get("category") == "PLAYER_ACTION"
            data = {**data, "role": "assistant" if moved else "user"}
        return data


class TextArenaObservation(Observation):
    #: the text the current player sees now (the rules after reset, then the game's reply)
    prompt: str = ""
    #: as OpenEnv's server sends it with TextArena's text wrapper: one message from the game
    #: (`sender_id` -1, category `MESSAGE`) whose content is the whole transcript so far, each
    #: entry on a line of its own as `[GAME] ...` or `[Player 0] ...`; it only grows, so the new
    #: text of a step is what follows the previous content
    messages: list[TextArenaMessage] = Field(default_factory=list)
    current_player_id: int = 0
    #: the players of the game (TextArena's role mapping)
    legal_players: list[int] = Field(default_factory=list)
    #: game-specific details, e.g. Wordle's feedback, guesses left and `reward_signals`
    info: dict[str, Any] = Field(default_factory=dict)
    #: the same conversation, one message per entry (the rules, each move, each reply), with its
    #: `category` and chat `role` (ready for a chat template)
    conversation: list[TextArenaMessage] = Field(default_factory=list)
    env_id: str = ""
    #: final reward per player id (empty until the game is over)
    rewards: dict[int, float] = Field(default_factory=dict)


class TextArenaState(State):
    env_id: str = ""
    num_players: int = 1
    #: reported as configured (`TEXTARENA_MAX_TURNS`), as in OpenEnv
    max_turns: int | None = None
    #: valid moves played (an invalid move that is forgiven does not count)
    turn: int = 0
    last_reward: float = 0.0
    last_info: dict[str, Any] = Field(default_factory=dict)
    #: a snapshot of the game's state (TextArena's fields; Wordle's secret only once over)
    raw_state: dict[str, Any] = Field(default_factory=dict)
    seed: int | None = None
    #: "builtin" (the offline Wordle of this package) or "textarena"
    backend: str = "builtin"
    current_player_id: int = 0
    done: bool = False
    rewards: dict[int, float] = Field(default_factory=dict)
    total_reward: float = 0.0
