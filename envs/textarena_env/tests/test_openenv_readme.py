"""OpenEnv's `textarena_env` README code, run against this package's served environment.

Written as OpenEnv's README shows it (class, field and module names, `TEXTARENA_*` server
settings); the one change is that this package's client is async, so the blocking calls go
through `.sync()`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from openenv.testing import running_server
from textarena_env.server.wordle import feedback, word_list

APP = "textarena_env.server.app:app"


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with running_server(APP, env={"TEXTARENA_ENV_ID": "Wordle-v0"}) as url:
        yield url


@pytest.fixture(scope="module")
def configured_server() -> Iterator[str]:
    """README "Environment Configuration": game, players, max turns and a game keyword."""
    env = {
        "TEXTARENA_ENV_ID": "Wordle-v0",
        "TEXTARENA_NUM_PLAYERS": "1",
        "TEXTARENA_MAX_TURNS": "12",
        "TEXTARENA_DOWNLOAD_NLTK": "0",
        "TEXTARENA_KW_num_guesses": "3",
    }
    with running_server(APP, env=env) as url:
        yield url


def test_quick_start_plays_wordle(server: str) -> None:
    from textarena_env import TextArenaAction, TextArenaEnv

    env = TextArenaEnv(base_url=server).sync()
    try:
        result = env.reset()
        assert "Wordle" in result.observation.prompt
        assert result.reward == 0.0 and result.done is False

        guesses = ["[crane]", "[slate]", "[audio]"]
        seen = []
        for guess in guesses:
            result = env.step(TextArenaAction(message=guess))
            for message in result.observation.messages:
                seen.append(message.content)
            assert result.reward is not None and isinstance(result.done, bool)
            if result.done:
                break
    finally:
        env.close()
    obs = result.observation
    assert any("Feedback:" in text for text in seen)
    assert [m.category for m in obs.messages[:3]] == ["PROMPT", "PLAYER_ACTION", "GAME_MESSAGE"]
    assert obs.messages[0].sender_id == -1 and obs.messages[1].sender_id == 0
    assert obs.current_player_id == 0 and obs.legal_players == [0]
    signals = obs.info["reward_signals"]
    assert set(signals) == {
        "wordle.greens",
        "wordle.yellows",
        "wordle.repetitions",
        "wordle.correct",
    }
    assert signals["wordle.greens"] == obs.info["feedback"][-1].count("G") / 5


def test_connecting_to_an_existing_server_and_the_state(server: str) -> None:
    from textarena_env import TextArenaAction, TextArenaEnv

    env = TextArenaEnv(base_url=server).sync()
    result = env.reset(seed=4)
    result = env.step(TextArenaAction(message="[crane]"))
    assert result.observation.info["guesses"] == ["crane"]
    state = env.state()
    assert (state.env_id, state.num_players, state.turn, state.step_count) == ("Wordle-v0", 1, 1, 1)
    assert state.last_reward == 0.0 and state.max_turns is None
    assert state.raw_state["game_state"]["guess_history"][0][0] == "crane"
    assert "secret_word" not in state.raw_state["game_state"]
    env.close()


def test_solving_pays_one(server: str) -> None:
    from textarena_env import TextArenaAction, TextArenaEnv

    with TextArenaEnv(base_url=server).sync() as env:
        result = env.reset(seed=2)
        history: list[tuple[str, str]] = []
        while not result.done:
            word = next(w for w in word_list() if all(feedback(g, w) == p for g, p in history))
            result = env.step(TextArenaAction(message=f"[{word}]"))
            history.append((word, result.observation.info["feedback"][-1]))
        assert (
            result.reward == 1.0
            and result.observation.info["reward_signals"]["wordle.correct"] == 1.0
        )
        assert env.state().last_reward == 1.0


def test_server_settings_from_the_environment(configured_server: str) -> None:
    from textarena_env import TextArenaAction, TextArenaEnv

    with TextArenaEnv(base_url=configured_server).sync() as env:
        result = env.reset(seed=0)
        assert result.observation.info["guesses_left"] == 3  # TEXTARENA_KW_num_guesses
        assert env.state().max_turns == 12
        for word in ("[crane]", "[about]", "[water]"):
            result = env.step(TextArenaAction(message=word))
        assert result.done and 0.0 <= result.reward < 1.0  # lost: partial credit of the last guess


def test_direct_environment_testing() -> None:
    from textarena_env.models import TextArenaAction
    from textarena_env.server.environment import TextArenaEnvironment

    env = TextArenaEnvironment(env_id="Wordle-v0", num_players=1)
    obs = env.reset()
    assert obs.prompt
    obs = env.step(TextArenaAction(message="[crane]"))
    assert obs.done is False and obs.reward == 0.0


def test_messages_built_the_openenv_way_get_a_role() -> None:
    from textarena_env import TextArenaMessage

    move = TextArenaMessage(sender_id=0, content="[crane]", category="PLAYER_ACTION")
    game = TextArenaMessage(sender_id=-1, content="Feedback: ...", category="GAME_MESSAGE")
    assert (move.role, game.role) == ("assistant", "user")
