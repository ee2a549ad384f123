"""Play our atari_env with the *published* OpenEnv client, as OpenEnv's atari client would.

Run by tests/compat/test_envs_atari.py with the compat venv's python (openenv==0.10.0):
`<compat-python> published_atari_script.py URL`. It sends OpenEnv's action dicts (all four
fields, as OpenEnv's `AtariEnv._step_payload` does) through `GenericEnvClient` in a plain `with`
block and prints one JSON object summarising what came back.
"""

from __future__ import annotations

import base64
import json
import sys
from typing import Any

from openenv.core import GenericEnvClient


def summary(result: Any) -> dict[str, Any]:
    obs = dict(result.observation)
    screen = obs.pop("screen", None)
    return {
        "keys": sorted(obs) + (["screen"] if screen is not None else []),
        "screen_len": None if screen is None else len(screen),
        "screen_ints": screen is not None and all(type(v) is int for v in screen[:1000]),
        "screen_head": None if screen is None else screen[:50],
        "observation": {k: v for k, v in obs.items() if k != "frame_b64"},
        "reward": result.reward,
        "done": result.done,
    }


def main() -> None:
    out: dict[str, Any] = {"steps": []}
    with GenericEnvClient(base_url=sys.argv[1]) as env:
        out["reset"] = summary(env.reset())
        for action_id in (2, 3, 0):
            action = {
                "action_id": action_id,
                "game_name": "pong",
                "obs_type": "rgb",
                "full_action_space": False,
            }
            out["steps"].append(summary(env.step(action)))
        try:
            env.step({"action_id": 6})
            out["invalid"] = None
        except Exception as exc:  # the published client's own error type
            out["invalid"] = {"type": type(exc).__name__, "message": str(exc)}
        out["after_invalid"] = summary(env.step({"action_id": 0}))
        out["state"] = env.state()
        # The compact frame: OpenEnv's client negotiates nothing, so it arrives as base64 text
        listed = env.reset(seed=0, frame_format="list").observation["screen"]
        compact = env.reset(seed=0, frame_format="bytes").observation
        raw = base64.b64decode(compact["frame_bytes"])
        out["bytes_frame"] = {
            "format": compact["frame_format"],
            "shape": compact["frame_shape"],
            "length": len(raw),
            "equals_list": list(raw) == listed,
        }
    print(json.dumps(out, default=repr))


if __name__ == "__main__":
    main()
