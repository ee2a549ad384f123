"""TextArena games behind the OpenEnv API; Wordle is played by the built-in `Wordle`.

`Wordle-v0` (the default, or `TEXTARENA_ENV_ID`) runs offline with this package's word list.
Any other id is made with `textarena.make(env_id)`; the agent plays every seat of a
multi-player game (`current_player_id` says whose turn it is). Games that need NLTK corpora
(downloaded at run time) fail at reset with a clear error when offline."""

from __future__ import annotations

import os
from typing import Any
from uuid import uuid4

from openenv.core.env_server import Environment
from openenv.core.errors import InvalidActionError

from ..models import TextArenaAction, TextArenaMessage, TextArenaObservation, TextArenaState
from .wordle import Wordle

DEFAULT_ENV_ID = "Wordle-v0"
#: ids played by this package's own offline Wordle
BUILTIN_WORDLE = ("Wordle-v0", "Wordle-v0-raw", "Wordle-v0-train")
#: TextArena games checked to run offline with textarena 0.7.4 (single player)
OFFLINE_TEXTARENA = (
    "GuessTheNumber-v0",
    "Mastermind-v0",
    "TowerOfHanoi-v0",
    "Minesweeper-v0",
    "FifteenPuzzle-v0",
    "LightsOut-v0",
    "Sudoku-v0",
)


class TextArenaEnvironment(Environment[TextArenaAction, TextArenaObservation, TextArenaState]):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, env_id: str | None = None) -> None:
        super().__init__()
        self._default_id = env_id or os.environ.get("TEXTARENA_ENV_ID") or DEFAULT_ENV_ID
        self._wordle: Wordle | None = None
        self._ta: Any = None
        self._messages: list[TextArenaMessage] = []
        self._prompt = ""
        self._state = TextArenaState(episode_id=str(uuid4()), env_id=self._default_id)

    # -- helpers --------------------------------------------------------------------------

    def _observe(self, reward: float | None = None, info: dict[str, Any] | None = None):
        st = self._state
        return TextArenaObservation(
            env_id=st.env_id,
            prompt=self._prompt,
            messages=list(self._messages),
            current_player_id=st.current_player_id,
            rewards=dict(st.rewards),
            info=info or {},
            done=st.done,
            reward=reward,
        )

    def _wordle_info(self) -> dict[str, Any]:
        game = self._wordle
        assert game is not None
        info: dict[str, Any] = {
            "guesses": [w for w, _ in game.guesses],
            "feedback": [p for _, p in game.guesses],
            "guesses_left": game.guesses_left,
            "solved": game.solved,
        }
        if game.over:
            info["target"] = game.target
        return info

    def _make_textarena(self, env_id: str, num_players: int, seed: int | None) -> None:
        try:
            import textarena as ta
        except ImportError as exc:  # pragma: no cover - textarena is a dependency
            raise ValueError(f"{env_id!r} needs the textarena package: {exc}") from exc
        try:
            game = ta.make(env_id)
            game.reset(num_players=num_players, seed=seed)
        except LookupError as exc:  # an NLTK corpus that is not installed
            raise ValueError(
                f"{env_id!r} needs data that TextArena downloads at run time ({exc!s:.80}); "
                f"offline, play {DEFAULT_ENV_ID} or one of {', '.join(OFFLINE_TEXTARENA)}"
            ) from exc
        except Exception as exc:
            raise ValueError(f"cannot start TextArena game {env_id!r}: {exc}") from exc
        self._ta = game

    def _textarena_prompt(self) -> None:
        player_id, observation = self._ta.get_observation()
        if not isinstance(observation, str):  # newer versions: a list of (sender, text, kind)
            observation = "\n".join(str(part[1]) for part in observation)
        self._state.current_player_id = int(player_id)
        self._prompt = observation
        self._messages.append(TextArenaMessage(role="user", content=observation))

    # -- the API --------------------------------------------------------------------------

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        env_id: str | None = None,
        num_players: int = 1,
        max_guesses: int = 6,
        strict_words: bool = True,
        **kwargs: Any,
    ) -> TextArenaObservation:
        env_id = env_id or self._default_id
        self._close_textarena()
        self._messages = []
        self._wordle = None
        builtin = env_id in BUILTIN_WORDLE
        self._state = TextArenaState(
            episode_id=episode_id or str(uuid4()),
            env_id=env_id,
            seed=seed,
            backend="builtin" if builtin else "textarena",
            num_players=1 if builtin else int(num_players),
        )
        if builtin:
            if not 1 <= int(max_guesses) <= 20:
                raise ValueError(f"max_guesses must be between 1 and 20, got {max_guesses}")
            self._wordle = Wordle(seed=seed, max_guesses=int(max_guesses), strict=strict_words)
            self._prompt = self._wordle.rules
            self._messages.append(TextArenaMessage(role="user", content=self._prompt))
            return self._observe(info=self._wordle_info())
        self._make_textarena(env_id, int(num_players), seed)
        self._textarena_prompt()
        return self._observe()

    def step(
        self, action: TextArenaAction, timeout_s: float | None = None, **kwargs: Any
    ) -> TextArenaObservation:
        st = self._state
        if st.done:
            raise ValueError("The game is over: call reset()")
        if self._wordle is None and self._ta is None:
            raise ValueError("call reset() first")
        if self._wordle is not None:
            game = self._wordle
            try:
                game.check(action.message)
            except ValueError as exc:
                raise InvalidActionError(
                    str(exc),
                    errors=[{"loc": ["message"], "msg": str(exc), "type": "value_error"}],
                ) from exc
            st.step_count += 1
            self._messages.append(TextArenaMessage(role="assistant", content=action.message))
            game.guess(action.message)
            self._prompt = game.render_feedback()
            self._messages.append(TextArenaMessage(role="user", content=self._prompt))
            reward = 0.0
            if game.over:
                st.done = True
                reward = 1.0 if game.solved else 0.0
                st.rewards = {0: reward}
            st.total_reward += reward
            return self._observe(reward=reward, info=self._wordle_info())
        # a TextArena game
        st.step_count += 1
        actor = st.current_player_id
        self._messages.append(TextArenaMessage(role="assistant", content=action.message))
        done, info = self._ta.step(action.message)
        info = dict(info or {})
        reward = 0.0
        if done:
            rewards, game_info = self._ta.close()
            self._ta = None
            st.done = True
            st.rewards = {int(k): float(v) for k, v in (rewards or {}).items()}
            reward = st.rewards.get(actor, 0.0)
            info["game_info"] = {str(k): v for k, v in (game_info or {}).items()}
            self._prompt = str(info["game_info"].get(str(actor), {}).get("reason", "game over"))
            self._messages.append(TextArenaMessage(role="user", content=self._prompt))
        else:
            self._textarena_prompt()
        st.total_reward += reward
        return self._observe(reward=reward, info=info)

    @property
    def state(self) -> TextArenaState:
        st = self._state
        if self._wordle is not None:
            st.done = self._wordle.over
        return st

    def _close_textarena(self) -> None:
        if self._ta is not None:
            game, self._ta = self._ta, None
            try:
                game.close()
            except Exception:
                pass

    def close(self) -> None:
        self._close_textarena()
