"""Play textarena_env, snake_env and openspiel_env with the *published* OpenEnv client.

Run by tests/compat/test_envs_b.py with the compat venv's python (openenv==0.10.0):
`<compat-python> published_envs_b_script.py TEXTARENA_URL SNAKE_URL OPENSPIEL_URL`. It imports
only the published package: `GenericEnvClient` sends the action dicts OpenEnv's own clients of
these environments send, and the script prints one JSON object: {env: {...observations...} or
{"error": ..., "traceback": ...}}.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from typing import Any

from openenv.core import GenericEnvClient

#: distinct valid Wordle guesses (six of them end any game)
WORDS = ["crane", "slate", "audio", "money", "light", "brick"]


def _step_summary(result: Any) -> dict[str, Any]:
    return {"reward": result.reward, "done": result.done, "keys": sorted(result.observation)}


def textarena(url: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with GenericEnvClient(base_url=url).sync() as env:
        result = env.reset()
        out["reset"] = {**_step_summary(result), "observation": result.observation}
        steps = []
        for word in WORDS:
            result = env.step({"message": f"[{word}]"})
            steps.append(_step_summary(result))
            if result.done:
                break
        out["steps"] = steps
        out["last_observation"] = result.observation
        out["state"] = env.state()
    return out


def snake(url: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with GenericEnvClient(base_url=url).sync() as env:
        result = env.reset()
        obs = result.observation
        out["reset"] = _step_summary(result)
        out["grid_shape"] = [len(obs["grid"]), len(obs["grid"][0])]
        out["observation_shape"] = [
            len(obs["observation"]),
            len(obs["observation"][0]),
            len(obs["observation"][0][0]),
        ]
        out["reset_counters"] = {k: obs[k] for k in ("episode_score", "episode_steps", "alive")}
        rewards = []
        while not result.done:  # straight on (noop) until the wall
            result = env.step({"action": 0})
            rewards.append(result.reward)
        obs = result.observation
        out["rewards"] = rewards
        out["last"] = {
            k: obs[k]
            for k in (
                "episode_score",
                "episode_steps",
                "episode_fruits",
                "episode_kills",
                "alive",
            )
        }
        out["state"] = env.state()
    return out


def openspiel(url: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with GenericEnvClient(base_url=url).sync() as env:
        result = env.reset()
        out["reset"] = {**_step_summary(result), "observation": result.observation}
        steps = []
        while not result.done:
            action_id = result.observation["legal_actions"][0]
            result = env.step({"action_id": action_id, "game_name": "catch", "game_params": {}})
            steps.append({**_step_summary(result), "phase": result.observation["game_phase"]})
        out["steps"] = steps
        out["last_observation"] = result.observation
        out["state"] = env.state()
    return out


CHECKS: dict[str, Callable[[str], Any]] = {
    "textarena": textarena,
    "snake": snake,
    "openspiel": openspiel,
}


def main() -> None:
    results: dict[str, Any] = {}
    for (name, check), url in zip(CHECKS.items(), sys.argv[1:], strict=True):
        try:
            results[name] = check(url)
        except Exception as exc:
            results[name] = {
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(),
            }
    print(json.dumps(results, default=lambda o: o.model_dump() if hasattr(o, "model_dump") else o))


if __name__ == "__main__":
    main()
