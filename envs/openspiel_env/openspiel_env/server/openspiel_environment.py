"""OpenSpiel games played by one agent; the opponent and chance are sampled with a seeded RNG.

Configured like OpenEnv's `openspiel_env`: `OPENSPIEL_GAME` (default `catch`),
`OPENSPIEL_AGENT_PLAYER` (0) and `OPENSPIEL_OPPONENT_POLICY` (`random`)."""

from __future__ import annotations

import os
import random
from typing import Any
from uuid import uuid4

import pyspiel

from openenv.core.env_server import Environment, InvalidActionError

from ..models import OpenSpielAction, OpenSpielObservation, OpenSpielState

DEFAULT_GAME = "catch"
#: games this environment is tested with; any other registered sequential game with one or two
#: players loads too
TESTED_GAMES = (
    "catch",
    "cliff_walking",
    "blackjack",
    "tic_tac_toe",
    "connect_four",
    "kuhn_poker",
    "2048",
)
OPPONENTS = ("random", "first", "last", "middle", "first_legal")


def _invalid(field: str, message: str) -> InvalidActionError:
    return InvalidActionError(
        message, errors=[{"loc": [field], "msg": message, "type": "value_error"}]
    )


def load_game(name: str, params: dict[str, Any] | None = None) -> pyspiel.Game:
    """Load `name` (optionally with parameters, `"connect_four(rows=5)"` or `params`), checking
    that this environment can play it."""
    try:
        game = pyspiel.load_game(name, dict(params)) if params else pyspiel.load_game(name)
    except Exception as exc:  # pyspiel raises a bare RuntimeError / SpielError
        raise _invalid("game", f"unknown or invalid OpenSpiel game {name!r}: {exc}") from exc
    kind = game.get_type()
    if kind.dynamics != pyspiel.GameType.Dynamics.SEQUENTIAL:
        raise _invalid("game", f"game {name!r} is not sequential (simultaneous moves)")
    if game.num_players() not in (1, 2):
        raise _invalid("game", f"game {name!r} has {game.num_players()} players; 1 or 2 needed")
    return game


def _hide_chance(entry: dict[str, Any]) -> dict[str, Any]:
    """A chance outcome of an imperfect-information game may be private (the dealer's hole card,
    the opponent's card): the agent learns that chance played, not what. What it may see is in
    its own `observation_string` / `info_state_string`."""
    if entry["player"] != int(pyspiel.PlayerId.CHANCE):
        return entry
    return {"player": entry["player"], "action_id": None, "action": None}


class OpenSpielEnvironment(Environment[OpenSpielAction, OpenSpielObservation, OpenSpielState]):
    """The agent plays `agent_player` (0) of an OpenSpiel game. In two-player games the other
    player is a built-in opponent (`"random"`: uniform over the legal actions; `"first"` (or
    `"first_legal"`), `"last"`, `"middle"`: that legal id in sorted order). Chance nodes are
    sampled from their distribution with the episode's RNG, so a seeded reset replays the same
    episode for the same agent actions.

    Reward per step: the change of the agent's return over its move and everything that follows
    until its next turn (the opponent's reply, chance). For games that pay only at the end this is
    the final return on the last step and 0 before; games with intermediate rewards (2048) pay
    them as they come. An illegal action id is a VALIDATION_ERROR naming `action_id`; the game is
    unchanged."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(
        self,
        game_name: str | None = None,
        agent_player: int | None = None,
        opponent_policy: str | None = None,
        game_params: dict[str, Any] | None = None,
        *,
        game: str | None = None,
        opponent: str | None = None,
    ) -> None:
        super().__init__()
        env = os.environ
        self._default_game = (
            game_name or game or env.get("OPENSPIEL_GAME", "").strip() or DEFAULT_GAME
        )
        if agent_player is None:
            agent_player = int(env.get("OPENSPIEL_AGENT_PLAYER", "").strip() or 0)
        self._default_agent = int(agent_player)
        opponent = (
            opponent_policy
            or opponent
            or env.get("OPENSPIEL_OPPONENT_POLICY", "").strip()
            or "random"
        )
        if opponent not in OPPONENTS:
            raise ValueError(f"unknown opponent {opponent!r}; choose one of {OPPONENTS}")
        self._default_opponent = opponent
        self._default_params = dict(game_params or {})
        self._last_opponent_action: int | None = None
        self._games: dict[str, pyspiel.Game] = {}
        self._rng = random.Random()
        self._game: pyspiel.Game | None = None
        self._spiel_state: Any = None
        self._other: list[dict] = []
        self._state = OpenSpielState(episode_id=str(uuid4()))

    # -- helpers --------------------------------------------------------------------------

    def _load(self, name: str, params: dict[str, Any]) -> pyspiel.Game:
        key = f"{name}|{sorted(params.items())}"
        if key not in self._games:
            self._games[key] = load_game(name, params)
        return self._games[key]

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
                legal = sorted(s.legal_actions(player))
                policy = self._state.opponent
                if policy in ("first", "first_legal"):
                    action = legal[0]
                elif policy == "last":
                    action = legal[-1]
                elif policy == "middle":
                    action = legal[len(legal) // 2]
                else:
                    action = self._rng.choice(legal)
                self._apply(int(action), int(player))
                self._last_opponent_action = int(action)

    def _observe(
        self, reward: float | None, message: str = "", initial: bool = False
    ) -> OpenSpielObservation:
        s, st, game = self._spiel_state, self._state, self._game
        assert game is not None
        kind = game.get_type()
        me = st.agent_player
        done = bool(s.is_terminal())
        legal = [] if done else [int(a) for a in s.legal_actions(me)]
        info_state_string = obs_string = None
        tensor = shape = None
        if kind.provides_information_state_string:
            info_state_string = s.information_state_string(me)
        if kind.provides_observation_string:
            obs_string = s.observation_string(me)
        if kind.provides_observation_tensor:
            tensor, shape = s.observation_tensor(me), game.observation_tensor_shape()
        elif kind.provides_information_state_tensor:
            tensor, shape = s.information_state_tensor(me), game.information_state_tensor_shape()
        # OpenEnv's `info_state` (as OpenSpiel's rl_environment): the information-state tensor
        # when the game has one, else the observation tensor
        if kind.provides_information_state_tensor:
            info_state = [float(x) for x in s.information_state_tensor(me)]
        elif kind.provides_observation_tensor:
            info_state = [float(x) for x in s.observation_tensor(me)]
        else:
            info_state = []
        returns = [float(r) for r in s.returns()]
        st.returns = returns
        st.episode_return = returns[me]
        st.done = done
        perfect = kind.information == pyspiel.GameType.Information.PERFECT_INFORMATION
        current = int(s.current_player())
        phase = "terminal" if done else ("initial" if initial else "playing")
        return OpenSpielObservation(
            info_state=info_state,
            legal_actions=legal,
            game_phase=phase,
            current_player_id=current,
            opponent_last_action=self._last_opponent_action,
            game=st.game,
            agent_player=me,
            current_player=current,
            legal_action_names=[s.action_to_string(me, a) for a in legal],
            info_state_string=info_state_string,
            observation_string=obs_string,
            observation_tensor=None if tensor is None else [float(x) for x in tensor],
            observation_tensor_shape=None if shape is None else [int(n) for n in shape],
            returns=returns,
            other_actions=list(self._other) if perfect else [_hide_chance(a) for a in self._other],
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
        game_params: dict[str, Any] | None = None,
        agent_player: int | None = None,
        **kwargs: Any,
    ) -> OpenSpielObservation:
        name = (game or kwargs.get("game_name") or self._default_game).strip()
        opponent = opponent or kwargs.get("opponent_policy") or self._default_opponent
        if opponent not in OPPONENTS:
            raise _invalid(
                "opponent", f"unknown opponent {opponent!r}; choose one of {', '.join(OPPONENTS)}"
            )
        params = self._default_params if game_params is None else dict(game_params)
        loaded = self._load(name, params)
        me = self._default_agent if agent_player is None else int(agent_player)
        if not 0 <= me < loaded.num_players():
            raise _invalid(
                "agent_player",
                f"agent_player {me} is not a player of {name!r} ({loaded.num_players()} player(s))",
            )
        self._game = loaded
        self._rng = random.Random(seed)
        self._spiel_state = loaded.new_initial_state()
        self._other = []
        self._last_opponent_action = None
        self._state = OpenSpielState(
            episode_id=episode_id or str(uuid4()),
            game_name=name,
            agent_player=me,
            opponent_policy=opponent,
            game_params=params,
            num_players=loaded.num_players(),
            game=name,
            seed=seed,
            opponent=opponent,
        )
        self._advance()
        who = "" if loaded.num_players() == 1 else f" against the {opponent} opponent"
        return self._observe(None, f"{name}: you are player {me}{who}", initial=True)

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
