"""OpenSpiel games played as player 0; the opponent and chance are sampled with a seeded RNG."""

from __future__ import annotations

import os
import random
from typing import Any
from uuid import uuid4

import pyspiel

from openenv.core.env_server import Environment, InvalidActionError

from ..models import OpenSpielAction, OpenSpielObservation, OpenSpielState

DEFAULT_GAME = "tic_tac_toe"
#: games this environment is tested with; any other registered sequential game with one or two
#: players loads too
TESTED_GAMES = ("blackjack", "tic_tac_toe", "connect_four", "kuhn_poker", "2048")
OPPONENTS = ("random", "first_legal")


def _invalid(field: str, message: str) -> InvalidActionError:
    return InvalidActionError(
        message, errors=[{"loc": [field], "msg": message, "type": "value_error"}]
    )


def load_game(name: str) -> pyspiel.Game:
    """Load `name` (optionally with parameters, `"connect_four(rows=5)"`), checking that this
    environment can play it."""
    try:
        game = pyspiel.load_game(name)
    except Exception as exc:  # pyspiel raises a bare RuntimeError / SpielError
        raise _invalid("game", f"unknown or invalid OpenSpiel game {name!r}: {exc}") from exc
    kind = game.get_type()
    if kind.dynamics != pyspiel.GameType.Dynamics.SEQUENTIAL:
        raise _invalid("game", f"game {name!r} is not sequential (simultaneous moves)")
    if game.num_players() not in (1, 2):
        raise _invalid("game", f"game {name!r} has {game.num_players()} players; 1 or 2 needed")
    return game


class OpenSpielEnvironment(Environment[OpenSpielAction, OpenSpielObservation, OpenSpielState]):
    """The agent plays player 0 of an OpenSpiel game. In two-player games the other player is a
    built-in opponent (`"random"`: uniform over the legal actions; `"first_legal"`: the lowest
    legal id). Chance nodes are sampled from their distribution with the episode's RNG, so a
    seeded reset replays the same episode for the same agent actions.

    Reward per step: the change of the agent's return over its move and everything that follows
    until its next turn (the opponent's reply, chance). For games that pay only at the end this is
    the final return on the last step and 0 before; games with intermediate rewards (2048) pay
    them as they come. An illegal action id is a VALIDATION_ERROR naming `action_id`; the game is
    unchanged."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, game: str | None = None, opponent: str = "random") -> None:
        super().__init__()
        self._default_game = game or os.environ.get("OPENSPIEL_GAME", "").strip() or DEFAULT_GAME
        if opponent not in OPPONENTS:
            raise ValueError(f"unknown opponent {opponent!r}; choose one of {OPPONENTS}")
        self._default_opponent = opponent
        self._games: dict[str, pyspiel.Game] = {}
        self._rng = random.Random()
        self._game: pyspiel.Game | None = None
        self._spiel_state: Any = None
        self._other: list[dict] = []
        self._state = OpenSpielState(episode_id=str(uuid4()))

    # -- helpers --------------------------------------------------------------------------

    def _load(self, name: str) -> pyspiel.Game:
        if name not in self._games:
            self._games[name] = load_game(name)
        return self._games[name]

    def _apply(self, action: int, player: int) -> None:
        s = self._spiel_state
        self._other.append(
            {"player": player, "action_id": action, "action": s.action_to_string(player, action)}
        )
        s.apply_action(action)
        self._state.history.append(action)

    def _advance(self) -> None:
        """Play chance and the opponent until it is the agent's turn or the game is over."""
        s = self._spiel_state
        agent = self._state.agent_player
        while not s.is_terminal() and s.current_player() != agent:
            if s.is_chance_node():
                chances = s.chance_outcomes()
                outcomes = [a for a, _ in chances]
                action = self._rng.choices(outcomes, weights=[p for _, p in chances])[0]
                self._apply(int(action), int(pyspiel.PlayerId.CHANCE))
            else:
                player = s.current_player()
                legal = s.legal_actions(player)
                if self._state.opponent == "first_legal":
                    action = min(legal)
                else:
                    action = self._rng.choice(legal)
                self._apply(int(action), int(player))

    def _observe(self, reward: float | None, message: str = "") -> OpenSpielObservation:
        s, st, game = self._spiel_state, self._state, self._game
        assert game is not None
        kind = game.get_type()
        me = st.agent_player
        done = bool(s.is_terminal())
        legal = [] if done else [int(a) for a in s.legal_actions(me)]
        info_state = obs_string = None
        tensor = shape = None
        if kind.provides_information_state_string:
            info_state = s.information_state_string(me)
        if kind.provides_observation_string:
            obs_string = s.observation_string(me)
        if kind.provides_observation_tensor:
            tensor, shape = s.observation_tensor(me), game.observation_tensor_shape()
        elif kind.provides_information_state_tensor:
            tensor, shape = s.information_state_tensor(me), game.information_state_tensor_shape()
        returns = [float(r) for r in s.returns()]
        st.returns = returns
        st.episode_return = returns[me]
        st.done = done
        perfect = kind.information == pyspiel.GameType.Information.PERFECT_INFORMATION
        return OpenSpielObservation(
            game=st.game,
            agent_player=me,
            current_player=int(s.current_player()),
            legal_actions=legal,
            legal_action_names=[s.action_to_string(me, a) for a in legal],
            info_state=info_state,
            observation_string=obs_string,
            observation_tensor=None if tensor is None else [float(x) for x in tensor],
            observation_tensor_shape=None if shape is None else [int(n) for n in shape],
            returns=returns,
            other_actions=list(self._other),
            # str(state) shows hidden information (cards) in imperfect-information games
            state_string=str(s) if perfect else "",
            message=message,
            done=done,
            reward=reward,
        )

    # -- the API --------------------------------------------------------------------------

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        game: str | None = None,
        opponent: str | None = None,
        **kwargs: Any,
    ) -> OpenSpielObservation:
        name = (game or self._default_game).strip()
        opponent = self._default_opponent if opponent is None else opponent
        if opponent not in OPPONENTS:
            raise _invalid(
                "opponent", f"unknown opponent {opponent!r}; choose one of {', '.join(OPPONENTS)}"
            )
        loaded = self._load(name)
        self._game = loaded
        self._rng = random.Random(seed)
        self._spiel_state = loaded.new_initial_state()
        self._other = []
        self._state = OpenSpielState(
            episode_id=episode_id or str(uuid4()),
            game=name,
            seed=seed,
            opponent=opponent,
            agent_player=0,
            num_players=loaded.num_players(),
        )
        self._advance()
        who = "" if loaded.num_players() == 1 else f" against the {opponent} opponent"
        return self._observe(None, f"{name}: you are player 0{who}")

    def step(
        self, action: OpenSpielAction, timeout_s: float | None = None, **kwargs: Any
    ) -> OpenSpielObservation:
        st, s = self._state, self._spiel_state
        if s is None or s.is_terminal():
            raise ValueError("The game is over (or was never started): call reset()")
        me = st.agent_player
        legal = s.legal_actions(me)
        if action.action_id not in legal:
            raise _invalid(
                "action_id",
                f"action_id {action.action_id} is not legal here; legal action ids: {legal}",
            )
        before = float(s.returns()[me])
        self._other = []
        name = s.action_to_string(me, action.action_id)
        s.apply_action(action.action_id)
        st.history.append(action.action_id)
        st.step_count += 1
        self._advance()
        reward = float(s.returns()[me]) - before
        message = f"you played {name}"
        if s.is_terminal():
            message += f"; game over, returns {[float(r) for r in s.returns()]}"
        return self._observe(reward, message)

    @property
    def state(self) -> OpenSpielState:
        return self._state
