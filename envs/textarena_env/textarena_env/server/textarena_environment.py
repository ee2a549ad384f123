"""TextArena games behind the OpenEnv API; Wordle is played by the built-in `Wordle`.

Configured like OpenEnv's `textarena_env`: `TEXTARENA_ENV_ID` (default `Wordle-v0`),
`TEXTARENA_NUM_PLAYERS`, `TEXTARENA_MAX_TURNS` and `TEXTARENA_KW_<name>` (keyword arguments of
the game). `TEXTARENA_DOWNLOAD_NLTK` is accepted and ignored: nothing is downloaded at run time.
`Wordle-v0` runs offline with this package's word list; any other id is made with
`textarena.make(env_id)`, the agent playing every seat of a multi-player game. Games that need
NLTK corpora fail at reset with a clear error when they are not installed."""

from __future__ import annotations

import os
import re
from typing import Any
from uuid import uuid4

from openenv.core.env_server import Environment
from openenv.core.errors import InvalidActionError

from ..models import (
    GAME_ID,
    TextArenaAction,
    TextArenaMessage,
    TextArenaObservation,
    TextArenaState,
)
from .wordle import WORD_LENGTH, Wordle

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
#: invalid moves TextArena forgives in a row before the game is lost
ERROR_ALLOWANCE = 1
_SIGNAL_GUESS = re.compile(r"\[[A-Za-z]{5}\]")


def env_kwargs_from_environ(prefix: str = "TEXTARENA_KW_") -> dict[str, str]:
    """`TEXTARENA_KW_difficulty=hard` -> `{"difficulty": "hard"}`."""
    return {k[len(prefix) :].lower(): v for k, v in os.environ.items() if k.startswith(prefix)}


def _signal_guess(message: str) -> str:
    """The guess as Wordle reward signals count repetitions ("" when there is none)."""
    found = _SIGNAL_GUESS.search(message)
    if found:
        return found.group(0).lower()
    letters = re.sub(r"[^a-z]", "", message.lower())
    return f"[{letters[:WORD_LENGTH]}]" if len(letters) >= WORD_LENGTH else ""


def _json_safe(value: Any) -> Any:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_json_safe(v) for v in value]
    return str(value)


class TextArenaEnvironment(Environment[TextArenaAction, TextArenaObservation, TextArenaState]):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(
        self,
        env_id: str | None = None,
        *,
        num_players: int | None = None,
        max_turns: int | None = None,
        download_nltk: bool | None = None,
        env_kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        env = os.environ
        self._default_id = env_id or env.get("TEXTARENA_ENV_ID") or DEFAULT_ENV_ID
        if num_players is None:
            num_players = int(env.get("TEXTARENA_NUM_PLAYERS", "").strip() or 1)
        self._num_players = int(num_players)
        if max_turns is None and env.get("TEXTARENA_MAX_TURNS", "").strip():
            max_turns = int(env["TEXTARENA_MAX_TURNS"])
        self._max_turns = max_turns
        # `download_nltk` (TEXTARENA_DOWNLOAD_NLTK) is accepted for OpenEnv's signature: this
        # package never downloads at run time.
        self._env_kwargs = env_kwargs_from_environ() if env_kwargs is None else dict(env_kwargs)
        self._wordle: Wordle | None = None
        self._ta: Any = None
        self._messages: list[TextArenaMessage] = []
        self._ta_seen: dict[int, str] = {}
        self._ta_text = ""
        self._prompt = ""
        self._errors = 0
        self._reject_invalid = False
        self._seen_guesses: dict[str, int] = {}
        self._state = TextArenaState(episode_id=str(uuid4()), env_id=self._default_id)

    # -- helpers --------------------------------------------------------------------------

    def _say(self, content: str, category: str, sender: int = GAME_ID) -> None:
        self._messages.append(
            TextArenaMessage(sender_id=sender, content=content, category=category)
        )

    def _observe(self, reward: float, info: dict[str, Any] | None = None) -> TextArenaObservation:
        st = self._state
        st.last_reward = reward
        st.last_info = _json_safe(info or {})
        st.raw_state = self._snapshot()
        return TextArenaObservation(
            prompt=self._prompt,
            messages=[TextArenaMessage(sender_id=GAME_ID, content=self._full_text())],
            conversation=list(self._messages),
            current_player_id=st.current_player_id,
            legal_players=list(range(st.num_players)),
            info=info or {},
            env_id=st.env_id,
            rewards=dict(st.rewards),
            done=st.done,
            reward=reward,
        )

    def _full_text(self) -> str:
        if self._state.backend == "textarena":
            return self._ta_text
        return self._transcript()

    def _transcript(self) -> str:
        """The conversation as one text, the way TextArena's text wrapper renders it (and so
        OpenEnv's `messages[0].content`): `\n[GAME] ...` / `\n[Player 0] ...` per entry."""
        return "".join(
            f"\n[{'GAME' if m.sender_id == GAME_ID else f'Player {m.sender_id}'}] {m.content}"
            for m in self._messages
        )

    def _snapshot(self) -> dict[str, Any]:
        """TextArena-style state: turn, game state, rewards, done, roles."""
        st = self._state
        game_state: dict[str, Any] = {}
        if self._wordle is not None:
            game = self._wordle
            game_state = {
                "guess_history": [[w, list(p)] for w, p in game.guesses],
                "word_length": WORD_LENGTH,
                "num_guesses": game.max_guesses,
            }
            if st.done:  # never before: the state would give the answer away
                game_state["secret_word"] = game.target
        return {
            "turn": st.turn,
            "game_state": game_state,
            "rewards": {str(k): v for k, v in st.rewards.items()} if st.done else None,
            "done": st.done,
            "role_mapping": {str(p): f"Player {p}" for p in range(st.num_players)},
        }

    def _wordle_info(self) -> dict[str, Any]:
        game = self._wordle
        assert game is not None
        info: dict[str, Any] = {
            "guesses": [w for w, _ in game.guesses],
            "feedback": [p for _, p in game.guesses],
            "guesses_left": game.guesses_left,
            "solved": game.solved,
        }
        if self._state.done:
            info["target"] = game.target
        return info

    def _reward_signals(self, message: str, reward: float) -> dict[str, float]:
        """Wordle's auxiliary signals, under OpenEnv's names: greens and yellows of the latest
        feedback (share of the letters), repetitions (1 minus earlier uses of the guess),
        correct (the step's reward)."""
        game = self._wordle
        assert game is not None
        pattern = game.guesses[-1][1] if game.guesses else ""
        guess = _signal_guess(message)
        before = self._seen_guesses.get(guess, 0) if guess else 0
        if guess:
            self._seen_guesses[guess] = before + 1
        return {
            "wordle.greens": pattern.count("G") / WORD_LENGTH,
            "wordle.yellows": pattern.count("Y") / WORD_LENGTH,
            "wordle.repetitions": 1.0 - before,
            "wordle.correct": float(reward),
        }

    def _make_textarena(self, env_id: str, num_players: int, seed: int | None) -> None:
        try:
            import textarena as ta
        except ImportError as exc:  # pragma: no cover - textarena is a dependency
            raise ValueError(f"{env_id!r} needs the textarena package: {exc}") from exc
        try:
            game = ta.make(env_id, **self._env_kwargs)
            game.reset(num_players=num_players, seed=seed)
        except LookupError as exc:  # an NLTK corpus that is not installed
            raise ValueError(
                f"{env_id!r} needs data that TextArena downloads at run time ({exc!s:.80}); "
                f"offline, play {DEFAULT_ENV_ID} or one of {', '.join(OFFLINE_TEXTARENA)}"
            ) from exc
        except Exception as exc:
            raise ValueError(f"cannot start TextArena game {env_id!r}: {exc}") from exc
        self._ta = game

    def _textarena_prompt(self, category: str) -> None:
        """Read the current player's view. TextArena's text wrapper gives the player's whole
        transcript each time: it is `messages[0]` as it is, and only its new part joins the
        conversation."""
        player_id, observation = self._ta.get_observation()
        if not isinstance(observation, str):  # newer versions: a list of (sender, text, kind)
            observation = "".join(f"\n{part[1]}" for part in observation)
        player_id = int(player_id)
        seen = self._ta_seen.get(player_id, "")
        new = observation[len(seen) :] if observation.startswith(seen) else observation
        self._ta_seen[player_id] = observation
        self._ta_text = observation
        self._state.current_player_id = player_id
        self._prompt = observation
        self._say(new.strip(), category)

    def _wordle_options(self, max_guesses: int | None) -> int:
        """The number of guesses: `reset(max_guesses=...)`, else TextArena's `num_guesses`
        keyword (`TEXTARENA_KW_num_guesses`), else 6."""
        options = self._env_kwargs
        if int(options.get("word_length", WORD_LENGTH)) != WORD_LENGTH:
            raise ValueError(f"the built-in Wordle plays {WORD_LENGTH}-letter words only")
        if max_guesses is None:
            max_guesses = int(options.get("num_guesses", 6))
        if not 1 <= int(max_guesses) <= 20:
            raise ValueError(f"max_guesses must be between 1 and 20, got {max_guesses}")
        return int(max_guesses)

    # -- the API --------------------------------------------------------------------------

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        env_id: str | None = None,
        num_players: int | None = None,
        max_guesses: int | None = None,
        strict_words: bool = True,
        reject_invalid: bool = False,
        **kwargs: Any,
    ) -> TextArenaObservation:
        env_id = env_id or self._default_id
        self._close_textarena()
        self._messages = []
        self._ta_seen: dict[int, str] = {}
        self._ta_text = ""
        self._wordle = None
        self._errors = 0
        self._seen_guesses = {}
        self._reject_invalid = bool(reject_invalid)
        builtin = env_id in BUILTIN_WORDLE
        players = self._num_players if num_players is None else int(num_players)
        self._state = TextArenaState(
            episode_id=episode_id or str(uuid4()),
            env_id=env_id,
            num_players=1 if builtin else players,
            max_turns=self._max_turns,
            seed=seed,
            backend="builtin" if builtin else "textarena",
        )
        if builtin:
            guesses = self._wordle_options(max_guesses)
            self._wordle = Wordle(seed=seed, max_guesses=guesses, strict=strict_words)
            self._prompt = self._wordle.rules
            self._say(self._prompt, "PROMPT")
            return self._observe(0.0, self._wordle_info())
        self._make_textarena(env_id, players, seed)
        self._textarena_prompt("PROMPT")
        return self._observe(0.0)

    def step(
        self, action: TextArenaAction, timeout_s: float | None = None, **kwargs: Any
    ) -> TextArenaObservation:
        st = self._state
        if st.done:
            raise ValueError("The game is over: call reset()")
        if self._wordle is None and self._ta is None:
            raise ValueError("call reset() first")
        if self._wordle is not None:
            return self._step_wordle(action.message)
        # a TextArena game
        st.step_count += 1
        actor = st.current_player_id
        self._say(action.message, "PLAYER_ACTION", sender=actor)
        done, info = self._ta.step(action.message)
        info = _json_safe(dict(info or {}))
        st.turn = int(getattr(getattr(self._ta, "state", None), "turn", st.turn + 1))
        reward = 0.0
        if done:
            rewards, game_info = self._ta.close()
            self._ta = None
            st.done = True
            st.rewards = {int(k): float(v) for k, v in (rewards or {}).items()}
            reward = st.rewards.get(actor, 0.0)
            info["game_info"] = {str(k): v for k, v in _json_safe(game_info or {}).items()}
            self._prompt = str(info["game_info"].get(str(actor), {}).get("reason", "game over"))
            self._say(self._prompt, "GAME_MESSAGE")
            self._ta_text += f"\n[GAME] {self._prompt}"
        else:
            self._textarena_prompt("GAME_MESSAGE")
        st.total_reward += reward
        return self._observe(reward, info)

    def _step_wordle(self, message: str) -> TextArenaObservation:
        st, game = self._state, self._wordle
        assert game is not None
        try:
            game.check(message)
        except ValueError as exc:
            if self._reject_invalid:  # this package's strict mode: a validation error, no move
                raise InvalidActionError(
                    str(exc),
                    errors=[{"loc": ["message"], "msg": str(exc), "type": "value_error"}],
                ) from exc
            return self._invalid_wordle_move(message, str(exc))
        st.step_count += 1
        st.turn += 1
        self._errors = 0
        self._say(message, "PLAYER_ACTION", sender=0)
        game.guess(message)
        self._prompt = game.render_feedback()
        self._say(self._prompt, "GAME_MESSAGE")
        reward = 0.0
        if game.solved:
            self._end(1.0, "Congratulations! You guessed the word correctly!")
        elif game.out_of_guesses:
            share = game.completion()
            self._end(
                share,
                f"You are out of guesses; your last guess matched {round(share * 100)}% of the "
                f"word. The secret word was {game.target!r}.",
            )
        if st.done:
            reward = st.rewards[0]
        info = self._wordle_info()
        info["reward_signals"] = self._reward_signals(message, reward)
        st.total_reward += reward
        return self._observe(reward, info)

    def _invalid_wordle_move(self, message: str, reason: str) -> TextArenaObservation:
        """TextArena's rule: the first invalid move is forgiven with a warning; another one in
        a row loses the game with the partial credit of the last valid guess."""
        st, game = self._state, self._wordle
        assert game is not None
        st.step_count += 1
        self._say(message, "PLAYER_ACTION", sender=0)
        reward = 0.0
        if self._errors < ERROR_ALLOWANCE:
            self._errors += 1
            self._prompt = (
                f"You attempted an invalid move. Reason: {reason}. Please resubmit a valid move "
                "(a five-letter word in square brackets)."
            )
            self._say(self._prompt, "GAME_ADMIN")
        else:
            self._end(game.completion(), f"Invalid Move: {reason}")
            reward = st.rewards[0]
        info = self._wordle_info()
        info["invalid_move"] = reason
        info["reward_signals"] = self._reward_signals(message, reward)
        st.total_reward += reward
        return self._observe(reward, info)

    def _end(self, reward: float, reason: str) -> None:
        st = self._state
        st.done = True
        st.rewards = {0: reward}
        self._prompt = reason
        self._say(reason, "GAME_MESSAGE")

    @property
    def state(self) -> TextArenaState:
        return self._state

    def _close_textarena(self) -> None:
        if self._ta is not None:
            game, self._ta = self._ta, None
            try:
                game.close()
            except Exception:
                pass

    def close(self) -> None:
        self._close_textarena()
