"""Use reasoning_gym_env the way OpenEnv's README and client do, with the *published* client.

Run by tests/compat/test_envs_reasoning_gym.py with the compat venv's python (openenv==0.10.0):
`<compat-python> published_reasoning_gym_script.py URL`. The published `GenericEnvClient` sends
OpenEnv's reset options (`dataset_name`, `dataset_config`, `dataset_specs`, `seed`, `size`) and
`{"answer": ...}` actions; the script prints one JSON object with what it saw, or
{"error": ..., "traceback": ...}.
"""

from __future__ import annotations

import json
import sys
import traceback
from typing import Any

from openenv.core import GenericEnvClient


def _seen(result: Any) -> dict[str, Any]:
    return {"observation": result.observation, "reward": result.reward, "done": result.done}


def play(url: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with GenericEnvClient(base_url=url) as env:
        options = {"dataset_name": "leg_counting", "dataset_config": {}, "seed": 42, "size": 10}
        out["reset"] = _seen(env.reset(**options))
        out["wrong"] = _seen(env.step({"answer": "-1"}))
        out["next"] = _seen(env.reset())
        again = env.reset(**options)  # the same options: the same first question
        out["again"] = _seen(again)
        out["right"] = _seen(env.step({"answer": out["wrong"]["observation"]["correct_answer"]}))
        specs = [{"name": "chain_sum", "weight": 1}, {"name": "leg_counting", "weight": 2}]
        out["composite"] = _seen(
            env.reset(dataset_name="composite", dataset_specs=specs, seed=1, size=5)
        )
        out["composite_step"] = _seen(env.step({"answer": "0"}))
        out["state"] = env.state()
        try:
            env.reset(dataset_name="no_such_dataset", seed=1, size=5)
        except RuntimeError as exc:  # what OpenEnv's client raises for an error frame
            out["unknown_dataset"] = str(exc)
        out["after_error"] = _seen(env.reset())
    return out


def main() -> None:
    try:
        result = play(sys.argv[1])
    except Exception as exc:
        result = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    print(json.dumps(result, default=repr))


if __name__ == "__main__":
    main()
