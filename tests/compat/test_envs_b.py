"""PUBLISHED CLIENT -> OUR textarena_env, snake_env and openspiel_env.

published_envs_b_script.py runs in the compat venv (openenv==0.10.0) and plays an episode of
each environment with the published `GenericEnvClient`, sending the action dicts OpenEnv's own
clients of these environments send (`{"message"}`, `{"action"}`,
`{"action_id", "game_name", "game_params"}`). The observations it receives must carry OpenEnv's
fields with OpenEnv's types, rewards and done rules.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.server import serve

from .conftest import OUR_PYTHON

pytestmark = pytest.mark.compat

SCRIPT = Path(__file__).resolve().parent / "published_envs_b_script.py"
SCRIPT_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def results(compat_python: str) -> Iterator[dict[str, Any]]:
    with (
        serve("textarena_env.server.app:app", env={"TEXTARENA_ENV_ID": "Wordle-v0"}) as ta,
        serve("snake_env.server.app:app", python=OUR_PYTHON) as snake,
        serve("openspiel_env.server.app:app", env={"OPENSPIEL_GAME": "catch"}) as spiel,
    ):
        proc = subprocess.run(
            [compat_python, str(SCRIPT), ta.url, snake.url, spiel.url],
            capture_output=True,
            text=True,
            timeout=SCRIPT_TIMEOUT_S,
            cwd=SCRIPT.parent,  # not the repo root: nothing of ours is importable
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    yield json.loads(proc.stdout)


def check(results: dict[str, Any], name: str) -> dict[str, Any]:
    result = results[name]
    assert "error" not in result, f"{name} raised:\n{result.get('traceback')}"
    return result


def test_textarena_wordle_with_openenv_fields(results: dict[str, Any]) -> None:
    out = check(results, "textarena")
    openenv_fields = {"prompt", "messages", "current_player_id", "legal_players", "info"}
    assert openenv_fields <= set(out["reset"]["keys"])
    assert out["reset"]["reward"] == 0.0 and out["reset"]["done"] is False
    # as OpenEnv's Wordle server: one game message holding the transcript, which only grows
    reset_messages = out["reset"]["observation"]["messages"]
    assert len(reset_messages) == 1 and {"sender_id", "content", "category"} <= set(
        reset_messages[0]
    )
    assert (reset_messages[0]["sender_id"], reset_messages[0]["category"]) == (-1, "MESSAGE")
    assert reset_messages[0]["content"].startswith("\n[GAME] ")
    steps, last = out["steps"], out["last_observation"]
    assert steps[-1]["done"] and all(not s["done"] for s in steps[:-1])
    assert all(s["reward"] == 0.0 for s in steps[:-1])
    # a win pays 1; a loss the share of the last guess's letters (greens + half the yellows)
    pattern = last["info"]["feedback"][-1]
    expected = (
        1.0 if last["info"]["solved"] else (pattern.count("G") + 0.5 * pattern.count("Y")) / 5
    )
    assert steps[-1]["reward"] == expected
    signals = last["info"]["reward_signals"]
    assert signals["wordle.correct"] == expected and signals["wordle.repetitions"] == 1.0
    transcript = last["messages"][0]["content"]
    assert transcript.startswith(reset_messages[0]["content"]) and "\nFeedback:\n" in transcript
    assert last["legal_players"] == [0] and last["current_player_id"] == 0
    state = out["state"]
    assert state["env_id"] == "Wordle-v0" and state["num_players"] == 1
    assert state["turn"] == len(steps) and state["last_reward"] == expected
    assert {"max_turns", "last_info", "raw_state"} <= set(state)


def test_snake_with_openenv_fields(results: dict[str, Any]) -> None:
    out = check(results, "snake")
    openenv_fields = {
        "grid",
        "observation",
        "episode_score",
        "episode_steps",
        "episode_fruits",
        "episode_kills",
        "alive",
    }
    assert openenv_fields <= set(out["reset"]["keys"])
    assert out["grid_shape"] == [20, 20] and out["observation_shape"] == [20, 20, 8]
    assert out["reset"]["reward"] == 0.0
    assert out["reset_counters"] == {"episode_score": 0.0, "episode_steps": 0, "alive": True}
    rewards = out["rewards"]
    # from the middle, heading right: 8 moves to the last column inside the wall, then the wall
    assert rewards[-1] == -1.0 and len(rewards) == 9
    assert all(r == pytest.approx(0.001) or r == pytest.approx(1.001) for r in rewards[:-1])
    last = out["last"]
    assert last["alive"] is False and last["episode_steps"] == 9 and last["episode_kills"] == 0
    assert last["episode_score"] == pytest.approx(sum(rewards))
    assert out["state"]["step_count"] == 9 and out["state"]["episode_id"]


def test_openspiel_catch_with_openenv_fields(results: dict[str, Any]) -> None:
    out = check(results, "openspiel")
    openenv_fields = {
        "info_state",
        "legal_actions",
        "game_phase",
        "current_player_id",
        "opponent_last_action",
    }
    assert openenv_fields <= set(out["reset"]["keys"])
    reset = out["reset"]["observation"]
    assert len(reset["info_state"]) == 50 and all(isinstance(x, float) for x in reset["info_state"])
    assert reset["legal_actions"] == [0, 1, 2] and reset["game_phase"] == "initial"
    assert reset["current_player_id"] == 0 and reset["opponent_last_action"] is None
    assert out["reset"]["reward"] is None and out["reset"]["done"] is False
    steps = out["steps"]
    assert len(steps) == 9 and [s["done"] for s in steps] == [False] * 8 + [True]
    assert [s["phase"] for s in steps] == ["playing"] * 8 + ["terminal"]
    assert [s["reward"] for s in steps[:-1]] == [0.0] * 8 and steps[-1]["reward"] in (-1.0, 1.0)
    assert out["last_observation"]["legal_actions"] == []
    state = out["state"]
    assert (state["game_name"], state["agent_player"], state["opponent_policy"]) == (
        "catch",
        0,
        "random",
    )
    assert state["game_params"] == {} and state["num_players"] == 1 and state["step_count"] == 9
