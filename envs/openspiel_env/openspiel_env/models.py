"""Typed models of the OpenSpiel environment.

A superset of OpenEnv's `openspiel_env` models: OpenEnv's field names, types and defaults
(`info_state`, `legal_actions`, `game_phase`, `current_player_id`, `opponent_last_action`;
`game_name`, `opponent_policy`, `game_params` in the state) plus this package's richer fields."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from openenv.core.env_server.types import Action, Observation, State

#: built-in opponents: OpenEnv's names (`random`, `first`, `last`, `middle`) and this
#: package's older `first_legal` (the same as `first`)
Opponent = Literal["random", "first", "last", "middle", "first_legal"]
GamePhase = Literal["initial", "playing", "terminal"]


class OpenSpielAction(Action):
    """The agent's move: an action id taken from `observation.legal_actions`.

    `game_name` and `game_params` are accepted for OpenEnv compatibility and ignored, as in
    OpenEnv: the game is the server's (`OPENSPIEL_GAME`) or `reset(game=...)`."""

    # Legal sample actions for the checkers: a whole game of the default `catch` from
    # reset(seed=0), whose three actions are always legal (docs/testing.md).
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"action_id": 0}, {"action_id": 1}, {"action_id": 2}]}
    )

    action_id: int
    game_name: str = "catch"
    game_params: dict[str, Any] = Field(default_factory=dict)


class OpenSpielObservation(Observation):
    # -- OpenEnv's fields ------------------------------------------------------------------
    #: the agent's information-state tensor (the observation tensor when the game has no
    #: information-state tensor), flattened; empty when the game provides neither
    info_state: list[float] = Field(default_factory=list)
    #: the agent's legal action ids (empty when the game is over)
    legal_actions: list[int] = Field(default_factory=list)
    #: "initial" after reset, "playing", "terminal" once the game is over
    game_phase: GamePhase = "playing"
    #: whose turn it is: the agent's id while the game goes on; OpenSpiel's terminal id (-4)
    #: once it is over
    current_player_id: int = 0
    #: the opponent's last action id in this episode (None before the opponent has moved)
    opponent_last_action: int | None = None
    # -- this package's fields -------------------------------------------------------------
    #: the OpenSpiel game name, e.g. "tic_tac_toe"
    game: str = ""
    #: the player the agent controls
    agent_player: int = 0
    #: the same as `current_player_id`
    current_player: int = 0
    #: `legal_action_names[i]` is the game's name for `legal_actions[i]`
    legal_action_names: list[str] = Field(default_factory=list)
    #: the agent's information-state string when the game provides one, else None
    info_state_string: str | None = None
    #: the agent's observation string when the game provides one, else None
    observation_string: str | None = None
    #: the agent's observation tensor (flattened; the info-state tensor when the game has no
    #: observation tensor), or None when the game provides neither
    observation_tensor: list[float] | None = None
    #: the shape of the tensor before flattening
    observation_tensor_shape: list[int] | None = None
    #: every player's return so far (the final returns once `done`)
    returns: list[float] = Field(default_factory=list)
    #: actions played since the agent's last move by the opponent and by chance, as
    #: `{"player": id (-1 for chance), "action_id": ..., "action": name}`
    other_actions: list[dict[str, Any]] = Field(default_factory=list)
    #: OpenSpiel's text form of the whole state (the public board, for perfect-information games)
    state_string: str = ""
    message: str = ""


class OpenSpielState(State):
    # -- OpenEnv's fields ------------------------------------------------------------------
    game_name: str = "catch"
    agent_player: int = 0
    opponent_policy: str = "random"
    game_params: dict[str, Any] = Field(default_factory=dict)
    num_players: int = 1
    # -- this package's fields -------------------------------------------------------------
    #: the game as loaded, with its parameters (e.g. "connect_four(rows=5)")
    game: str = ""
    seed: int | None = None
    opponent: Opponent = "random"
    #: every action applied since the start (agent, opponent and chance), in order
    history: list[int] = Field(default_factory=list)
    returns: list[float] = Field(default_factory=list)
    episode_return: float = 0.0
    done: bool = False
