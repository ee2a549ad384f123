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
    # OpenEnv's messages: one game message holding the whole transcript
    assert len(obs.messages) == 1 and obs.messages[0].sender_id == -1
    assert obs.messages[0].content.startswith("\n[GAME] ") and "\n[Player 0] [crane]" in seen[-1]
    kinds = [m.category for m in obs.conversation[:3]]
    assert kinds == ["PROMPT", "PLAYER_ACTION", "GAME_MESSAGE"]
    assert obs.conversation[0].sender_id == -1 and obs.conversation[1].sender_id == 0
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


class TrainerWordle:
    """A Wordle tool as trainer code written for OpenEnv's Wordle server wraps it (the pattern
    of TRL's GRPO Wordle examples): the transcript in `messages[0].content` only grows, so each
    guess returns the text appended since the previous one."""

    def __init__(self, url: str) -> None:
        from textarena_env import TextArenaEnv

        self.client = TextArenaEnv(base_url=url).sync()

    def reset(self) -> str:
        result = self.client.reset()
        self.seen = result.observation.messages[0].content
        self.reward, self.done = 0.0, False
        return self.seen

    def guess(self, word: str) -> str:
        from textarena_env import TextArenaAction

        result = self.client.step(TextArenaAction(message=word))
        full = result.observation.messages[0].content
        new, self.seen = full[len(self.seen) :], full
        invalid = "You attempted an invalid move" in new
        self.reward = 0.0 if invalid else result.reward
        self.done = result.done
        return new


def test_trainer_code_reads_new_feedback_from_the_growing_transcript(server: str) -> None:
    game = TrainerWordle(server)
    try:
        assert "Wordle" in game.reset()
        reply = game.guess("[crane]")
        assert reply.startswith("\n[Player 0] [crane]\n[GAME] You submitted [crane].\nFeedback:")
        assert "You have 5 guesses left." in reply and "Wordle" not in reply
        reply = game.guess("[crane]")  # a repeat: forgiven once, with a warning
        assert "You attempted an invalid move" in reply and not game.done
        reply = game.guess("[slate]")
        assert "[slate]" in reply and "Feedback:" in reply and "crane" not in reply
    finally:
        game.client.close()


def test_client_side_reward_providers_match_the_servers_signals(server: str) -> None:
    from textarena_env import TextArenaAction, TextArenaEnv, build_reward_providers

    providers = build_reward_providers("Wordle-v0")
    assert len(providers) == 1 and build_reward_providers("GuessTheNumber-v0") == []
    with TextArenaEnv(base_url=server).sync() as env:
        env.reset(seed=3)
        for provider in providers:
            provider.reset()
        for message in ("[crane]", "I say [slate]", "[slate]"):
            action = TextArenaAction(message=message)
            result = env.step(action)
            signals: dict[str, float] = {}
            for provider in providers:
                signals.update(provider.compute(action=action, observation=result.observation))
            assert signals == result.observation.info["reward_signals"]
    assert signals["wordle.repetitions"] == 0.0  # the third message repeats the second guess


def test_models_accept_what_openenvs_client_builds() -> None:
    """OpenEnv's client builds the observation and state field by field from the payload."""
    from textarena_env import TextArenaMessage, TextArenaObservation, TextArenaState

    obs = TextArenaObservation(
        prompt="p",
        messages=[TextArenaMessage(sender_id=-1, content="c", category="MESSAGE")],
        current_player_id=0,
        legal_players=[0],
        info={},
        reward=None,
        done=False,
        metadata={},
    )
    state = TextArenaState(
        episode_id="e",
        step_count=0,
        env_id="Wordle-v0",
        num_players=1,
        max_turns=None,
        turn=0,
        last_reward=0.0,
        last_info={},
        raw_state={},
    )
    assert obs.messages[0].role == "user" and state.turn == 0
