"""Play chess_env, maze_env, grid_world_env and connect4_env with the *published* OpenEnv client.

Run by tests/compat/test_envs_a.py with the compat venv's python (openenv==0.10.0):
`<compat-python> published_envs_a_script.py '{"GAME": "URL", ...}'`. It sends OpenEnv's action
dicts through the published `GenericEnvClient`, used as OpenEnv's READMEs show (a plain `with`
block, plain calls), and prints one JSON object with what it saw in each game:
{GAME: {"reset": ..., "steps": [...], "state": ...} or {"error": ..., "traceback": ...}}.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from typing import Any

from openenv.core import GenericEnvClient

Policy = Callable[[dict[str, Any], int], dict[str, Any]]

#: The README maze from its start to its exit: 0 up, 1 down, 2 left, 3 right.
MAZE_PATH = [3, 3, 1, 1, 2, 2, 1, 1, 3, 3, 3, 3, 3, 1, 1, 1, 3, 3]
GRID_PATH = ["DOWN"] * 4 + ["RIGHT"] * 4


def chess(obs: dict[str, Any], i: int) -> dict[str, Any]:
    if i == 0:
        return {"move": "e2e5"}  # illegal: OpenEnv gives -0.1 and the game goes on
    return {"move": obs["legal_moves"][0]}


def maze(obs: dict[str, Any], i: int) -> dict[str, Any]:
    return {"action": MAZE_PATH[i]}


def grid_world(obs: dict[str, Any], i: int) -> dict[str, Any]:
    return {"action": GRID_PATH[i]}


def connect4(obs: dict[str, Any], i: int) -> dict[str, Any]:
    return {"column": obs["legal_actions"][0]}


def connect4_invalid(obs: dict[str, Any], i: int) -> dict[str, Any]:
    return {"column": 7}


#: name -> (reset kwargs, policy, step limit)
GAMES: dict[str, tuple[dict[str, Any], Policy, int]] = {
    "chess_env": ({}, chess, 2000),
    "maze_env": ({}, maze, len(MAZE_PATH)),
    "grid_world_env": ({}, grid_world, len(GRID_PATH)),
    "connect4_env": ({"seed": 0}, connect4, 30),
    "connect4_env_invalid": ({}, connect4_invalid, 1),
}


def _seen(result: Any) -> dict[str, Any]:
    return {"observation": result.observation, "reward": result.reward, "done": result.done}


def play(game: str, url: str) -> dict[str, Any]:
    reset_kwargs, policy, limit = GAMES[game]
    out: dict[str, Any] = {"steps": []}
    with GenericEnvClient(base_url=url) as env:
        result = env.reset(**reset_kwargs)
        out["reset"] = _seen(result)
        for i in range(limit):
            if result.done:
                break
            result = env.step(policy(result.observation, i))
            out["steps"].append(_seen(result))
        out["state"] = env.state()
    return out


def main() -> None:
    results: dict[str, Any] = {}
    for game, url in json.loads(sys.argv[1]).items():
        try:
            results[game] = play(game, url)
        except Exception as exc:  # one failing game does not hide the others
            results[game] = {
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(),
            }
    print(json.dumps(results, default=repr))


if __name__ == "__main__":
    main()
