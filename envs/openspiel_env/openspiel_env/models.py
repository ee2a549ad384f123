"""Typed models of the OpenSpiel environment."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict

from openenv.core.env_server.types import Action, Observation, State

Opponent = Literal["random", "first_legal"]


class OpenSpielAction(Action):
    """The agent's move: an action id taken from `observation.legal_actions`."""

    # Legal sample actions for the checkers: a whole game of the default tic_tac_toe from
    # reset(seed=0) (docs/testing.md).
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"action_id": 0}, {"action_id": 1}, {"action_id": 2}]}
    )

    action_id: int


class OpenSpielObservation(Observation):
    #: the OpenSpiel game name, e.g. "tic_tac_toe"
    game: str = ""
    #: the player the agent controls (0)
    agent_player: int = 0
    #: whose turn it is: the agent's id while the game goes on; OpenSpiel's terminal id (-4)
    #: once it is over
    current_player: int = 0
    #: the agent's legal action ids (empty when the game is over)
    legal_actions: list[int] = []
    #: `legal_action_names[i]` is the game's name for `legal_actions[i]`
    legal_action_names: list[str] = []
    #: the agent's information-state string when the game provides one, else None
    info_state: str | None = None
    #: the agent's observation string when the game provides one, else None
    observation_string: str | None = None
    #: the agent's observation tensor (flattened; the info-state tensor when the game has no
    #: observation tensor), or None when the game provides neither
    observation_tensor: list[float] | None = None
    #: the shape of the tensor before flattening
    observation_tensor_shape: list[int] | None = None
    #: every player's return so far (the final returns once `done`)
    returns: list[float] = []
    #: actions played since the agent's last move by the opponent and by chance, as
    #: `{"player": id (-1 for chance), "action_id": ..., "action": name}`
    other_actions: list[dict] = []
    #: OpenSpiel's text form of the whole state (the public board, for perfect-information games)
    state_string: str = ""
    message: str = ""


class OpenSpielState(State):
    game: str = ""
    seed: int | None = None
    opponent: Opponent = "random"
    agent_player: int = 0
    num_players: int = 1
    #: every action applied since the start (agent, opponent and chance), in order
    history: list[int] = []
    returns: list[float] = []
    episode_return: float = 0.0
    done: bool = False
