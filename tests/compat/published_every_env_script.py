"""Reset, step and read the state of each of our environments with the *published* client.

Run by tests/compat/test_every_env.py with the compat venv's python (openenv==0.10.0):
`<compat-python> published_every_env_script.py '{"NAME": {"url": URL, "action": {...}}, ...}'`.
For each environment the published `GenericEnvClient`, used as OpenEnv's docs show it (a plain
`with` block, plain calls), does `reset(seed=0)`, one `step(action)` and `state()`; the script
prints one JSON object: {NAME: {"reset": ..., "step": ..., "state": ...} or {"error": ...}},
each result as {"observation", "reward", "done", "types"} (`types`: the Python types the
published client returned).
"""

from __future__ import annotations

import json
import sys
import traceback
from typing import Any

from openenv.core import GenericEnvClient


def _seen(result: Any) -> dict[str, Any]:
    return {
        "observation": result.observation,
        "reward": result.reward,
        "done": result.done,
        "types": [type(result).__name__, type(result.observation).__name__],
    }


def visit(url: str, action: dict[str, Any]) -> dict[str, Any]:
    with GenericEnvClient(base_url=url) as env:
        reset = _seen(env.reset(seed=0))
        step = _seen(env.step(action))
        state = env.state()
    return {"reset": reset, "step": step, "state": state, "state_type": type(state).__name__}


def main() -> None:
    out: dict[str, Any] = {}
    for name, target in json.loads(sys.argv[1]).items():
        try:
            out[name] = visit(target["url"], target["action"])
        except Exception as exc:  # one failing environment does not hide the others
            error = f"{type(exc).__name__}: {exc}"
            out[name] = {"error": error, "traceback": traceback.format_exc()}
    print(json.dumps(out, default=repr))


if __name__ == "__main__":
    main()
