"""PUBLISHED CLIENT -> OUR chess_env, maze_env, grid_world_env and connect4_env.

published_envs_a_script.py runs in the compat venv (openenv==0.10.0): its `GenericEnvClient`
plays an episode against our served environment with OpenEnv's action dicts. The observations
it sees must carry OpenEnv's fields with OpenEnv's values, rewards and done rules.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.server import RunningServer, serve

pytestmark = pytest.mark.compat

SCRIPT = Path(__file__).resolve().parent / "published_envs_a_script.py"
APPS = {
    "chess_env": "chess_env.server.app:app",
    "maze_env": "maze_env.server.app:app",
    "grid_world_env": "grid_world_env.server.app:app",
    "connect4_env": "connect4_env.server.app:app",
}


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, RunningServer]]:
    with (
        serve(APPS["chess_env"]) as chess,
        serve(APPS["maze_env"]) as maze,
        serve(APPS["grid_world_env"]) as grid,
        serve(APPS["connect4_env"]) as connect4,
    ):
        yield {
            "chess_env": chess,
            "maze_env": maze,
            "grid_world_env": grid,
            "connect4_env": connect4,
        }


@pytest.fixture(scope="module")
def played(compat_python: str, servers: dict[str, RunningServer]) -> dict[str, Any]:
    """Every game in one run of the script: {game: what the published client saw}."""
    games = {game: servers[game].url for game in APPS}
    games["connect4_env_invalid"] = servers["connect4_env"].url
    out = subprocess.run(
        [compat_python, str(SCRIPT), json.dumps(games)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=SCRIPT.parent,  # not the repo root: nothing of ours is importable
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def play(played: dict[str, Any], game: str) -> dict[str, Any]:
    seen = played[game]
    assert "error" not in seen, f"{game} raised:\n{seen.get('traceback')}"
    return seen


def test_chess(played: dict[str, Any]) -> None:
    seen = play(played, "chess_env")
    reset = seen["reset"]
    obs = reset["observation"]
    assert obs["fen"].startswith("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w")
    assert len(obs["legal_moves"]) == 20 and obs["is_check"] is False and obs["result"] is None
    assert (reset["reward"], reset["done"]) == (0.0, False)
    illegal, *moves = seen["steps"]
    assert (illegal["reward"], illegal["done"]) == (-0.1, False)
    assert illegal["observation"]["fen"] == obs["fen"]
    last = moves[-1]
    assert last["done"] and all(not step["done"] for step in moves[:-1])
    result = last["observation"]["result"]
    assert result in ("1-0", "0-1", "1/2-1/2")
    assert last["reward"] == {"1-0": 1.0, "0-1": -1.0, "1/2-1/2": 0.0}[result]
    assert all(step["reward"] == 0.0 for step in moves[:-1])
    state = seen["state"]
    assert state["fen"] == last["observation"]["fen"]
    assert state["current_player"] in ("white", "black")
    assert len(state["move_history"]) >= len(moves)


def test_maze(played: dict[str, Any]) -> None:
    seen = play(played, "maze_env")
    obs = seen["reset"]["observation"]
    assert obs["current_position"] == [0, 0] and obs["legal_actions"] == [3]
    assert seen["reset"]["reward"] == 0.0
    rewards = [step["reward"] for step in seen["steps"]]
    assert rewards == [-0.05] * 17 + [10.0]
    assert [step["done"] for step in seen["steps"]] == [False] * 17 + [True]
    first, last = seen["steps"][0]["observation"], seen["steps"][-1]["observation"]
    assert first["current_position"] == [1, 0] and first["previous_position"] == [0, 0]
    assert last["current_position"] == [7, 7] and last["legal_actions"] == []
    state = seen["state"]
    assert state["done"] is True and state["status"] == "win"
    assert state["current_position"] == [7, 7] and state["exit_cell"] == [7, 7]
    assert state["step_count"] == 18


def test_grid_world(played: dict[str, Any]) -> None:
    seen = play(played, "grid_world_env")
    obs = seen["reset"]["observation"]
    assert (obs["x"], obs["y"], seen["reset"]["reward"]) == (0, 0, 0.0)
    assert obs["suggested_action"] is None and isinstance(obs["message"], str)
    positions = [(s["observation"]["x"], s["observation"]["y"]) for s in seen["steps"]]
    assert positions == [(1, 0), (2, 0), (3, 0), (4, 0), (4, 1), (4, 2), (4, 3), (4, 4)]
    assert [s["reward"] for s in seen["steps"]] == [-0.1] * 7 + [1.0]
    assert [s["done"] for s in seen["steps"]] == [False] * 7 + [True]
    assert seen["state"]["step_count"] == 8


def test_connect4(played: dict[str, Any]) -> None:
    seen = play(played, "connect4_env")
    obs = seen["reset"]["observation"]
    assert obs["board"] == [[0] * 7 for _ in range(6)] and obs["legal_actions"] == list(range(7))
    assert seen["reset"]["reward"] == 0.0
    last = seen["steps"][-1]
    # Always the first legal column: the greedy opponent connects four first.
    assert last["done"] and last["reward"] == -1.0
    assert last["observation"]["legal_actions"] == []
    assert all(s["reward"] == 0.0 and not s["done"] for s in seen["steps"][:-1])
    state = seen["state"]
    assert state["board"] == last["observation"]["board"] and state["next_player"] == -1


def test_connect4_invalid_move(played: dict[str, Any]) -> None:
    seen = play(played, "connect4_env_invalid")
    (step,) = seen["steps"]
    assert (step["reward"], step["done"]) == (-1.0, True)
