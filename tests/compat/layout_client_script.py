"""Drive a server with the client an environment folder ships, under whichever `openenv` runs
this script: the published 0.10 package (compat venv) or ours.

    python layout_client_script.py PARENT PACKAGE CLIENT ACTION URL ACTION_JSON

PARENT is put first on `sys.path` so that PACKAGE (the environment folder, in OpenEnv's flat
layout) imports from there; CLIENT and ACTION are names the package exports. One episode is
played: reset, step(ACTION(**ACTION_JSON)), state, and for MCP clients call_tool. One JSON
object is printed.
"""

from __future__ import annotations

import importlib
import json
import sys
from typing import Any


def _dump(value: Any) -> Any:
    return value.model_dump() if hasattr(value, "model_dump") else value


def main() -> None:
    parent, package, client_name, action_name, url, action_json = sys.argv[1:7]
    sys.path.insert(0, parent)
    module = importlib.import_module(package)
    client_cls = getattr(module, client_name)
    action_cls = getattr(module, action_name)
    import openenv

    out: dict[str, Any] = {
        "openenv_file": openenv.__file__,
        "package_file": module.__file__,
        "client_mro": [c.__name__ for c in client_cls.__mro__],
    }
    with client_cls(base_url=url).sync() as env:
        reset = env.reset()
        out["reset"] = {"observation": _dump(reset.observation), "done": reset.done}
        step = env.step(action_cls(**json.loads(action_json)))
        out["step"] = {
            "observation": _dump(step.observation),
            "observation_type": type(step.observation).__name__,
            "reward": step.reward,
            "done": step.done,
        }
        out["state"] = _dump(env.state())
        if hasattr(env, "call_tool"):
            out["tools"] = sorted(tool.name for tool in env.list_tools())
            out["call_tool"] = env.call_tool("echo_message", message="over call_tool")
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main()
