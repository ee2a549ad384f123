"""The TextArena environment in-process (check_env, Wordle rules) and over the wire."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from openenv.core.errors import InvalidActionError
from openenv.testing import check_env, running_server
from textarena_env import TextArenaAction, TextArenaEnv
from textarena_env.server.textarena_environment import TextArenaEnvironment
from textarena_env.server.wordle import feedback, word_list


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with running_server("textarena_env.server.app:app") as url:
        yield url


def solve(info_history: list[tuple[str, str]]) -> str:
    """A consistent-candidate Wordle policy: the first word matching every feedback so far."""
    for word in word_list():
        if all(feedback(g, word) == p for g, p in info_history):
            return word
    raise AssertionError("no candidate left")


def test_passes_the_environment_checker() -> None:
    samples = [TextArenaAction(message=f"[{w}]") for w in ("crane", "about", "water")]
    report = check_env(TextArenaEnvironment, sample_actions=samples)
    assert report.ok, str(report)


def test_feedback_counts_repeated_letters() -> None:
    assert feedback("crane", "crane") == "GGGGG"
    assert feedback("eerie", "there") == "YXYXG"
    assert feedback("speed", "abide") == "XXYXY"


def test_invalid_guesses_are_rejected_without_costing_a_guess_when_asked() -> None:
    env = TextArenaEnvironment()
    env.reset(seed=0, reject_invalid=True)
    for bad in ("[crane", "[cran]", "[qzxvj]", "no guess here"):
        with pytest.raises(InvalidActionError):
            env.step(TextArenaAction(message=bad))
    assert env.state.step_count == 0
    env.reset(seed=0, strict_words=False)
    obs = env.step(TextArenaAction(message="[qzxvj]"))
    assert obs.info["guesses_left"] == 5


def test_invalid_moves_follow_textarena_rules() -> None:
    """One invalid move is forgiven with a warning; a second in a row loses the game with the
    partial credit of the last valid guess."""
    env = TextArenaEnvironment()
    env.reset(seed=0)
    target = env.state.raw_state["game_state"].get("secret_word")
    assert target is None  # the secret stays out of the state until the game is over
    first = env.step(TextArenaAction(message="crane"))  # no brackets: the message is the guess
    assert first.info["guesses"] == ["crane"] and not first.done
    warned = env.step(TextArenaAction(message="[cran]"))
    assert not warned.done and warned.reward == 0.0 and "invalid move" in warned.prompt
    assert warned.conversation[-1].category == "GAME_ADMIN" and warned.info["guesses_left"] == 5
    ok = env.step(TextArenaAction(message="[about]"))  # a valid move clears the warning
    assert not ok.done and env.state.turn == 2 and env.state.step_count == 3
    env.step(TextArenaAction(message="[about]"))  # a repeat is invalid: warned
    lost = env.step(TextArenaAction(message="[qzxvj]"))  # the second in a row: lost
    assert lost.done and lost.info["invalid_move"]
    pattern = lost.info["feedback"][-1]
    assert lost.reward == (pattern.count("G") + 0.5 * pattern.count("Y")) / 5
    assert env.state.raw_state["game_state"]["secret_word"] == lost.info["target"]


async def test_plays_wordle_over_the_wire(server: str) -> None:
    async with TextArenaEnv(base_url=server) as env:
        result = await env.reset(env_id="Wordle-v0", seed=7)
        assert "Wordle" in result.observation.prompt
        assert result.observation.conversation[0].role == "user"
        history: list[tuple[str, str]] = []
        total = 0.0
        while not result.done:
            guess = solve(history)
            result = await env.step(TextArenaAction(message=f"I guess [{guess}]"))
            history.append((guess, result.observation.info["feedback"][-1]))
            total += result.reward or 0.0
        assert result.observation.info["solved"]
        assert total == 1.0
        assert result.observation.rewards == {0: 1.0}
        assert result.observation.conversation[1].role == "assistant"
        state = await env.state()
        assert state.backend == "builtin" and state.total_reward == 1.0
        # same seed, same word
        again = await env.reset(env_id="Wordle-v0", seed=7)
        first = await env.step(TextArenaAction(message=f"[{history[-1][0]}]"))
        assert first.done and first.reward == 1.0 and again.observation.info["guesses_left"] == 6


async def test_invalid_guess_is_a_validation_error_over_the_wire(server: str) -> None:
    async with TextArenaEnv(base_url=server) as env:
        await env.reset(seed=1)
        warned = await env.step(TextArenaAction(message="no brackets"))
        assert "invalid move" in warned.observation.prompt and not warned.done
        await env.reset(seed=1, reject_invalid=True)
        with pytest.raises(Exception) as info:
            await env.step(TextArenaAction(message="[no brackets"))
        assert "brackets" in str(info.value)
        ok = await env.step(TextArenaAction(message="[crane]"))
        assert ok.observation.info["guesses_left"] == 5


async def test_plays_a_textarena_game_over_the_wire(server: str) -> None:
    async with TextArenaEnv(base_url=server) as env:
        result = await env.reset(env_id="GuessTheNumber-v0", seed=1)
        assert result.observation.current_player_id == 0
        low, high = 1, 20
        while not result.done:
            guess = (low + high) // 2
            result = await env.step(TextArenaAction(message=f"[{guess}]"))
            text = result.observation.prompt.lower().rsplit(f"[{guess}]", 1)[-1]
            if "higher" in text:
                low = guess + 1
            elif "lower" in text:
                high = guess - 1
        assert result.observation.rewards.get(0) == 1.0
        assert (await env.state()).backend == "textarena"
