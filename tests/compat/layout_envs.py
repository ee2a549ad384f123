"""Environment folders in OpenEnv's flat layout, made three ways, for the CLI and image tests:
by the published package's `openenv init`, by ours, and as a copy of the echo environment
written here in OpenEnv's layout (tests/compat/openenv_layout/echo_env)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ECHO_SOURCE = HERE / "openenv_layout" / "echo_env"
CLIENT_SCRIPT = HERE / "layout_client_script.py"
OUR_OPENENV = str(Path(sys.executable).with_name("openenv"))


@dataclass(frozen=True)
class LayoutEnv:
    """An environment folder and how to play one step of it with the client it ships."""

    root: Path
    client: str
    action: str
    action_args: dict[str, Any] = field(default_factory=dict)

    @property
    def package(self) -> str:
        return self.root.name


def published_init(compat_python: str, out: Path) -> LayoutEnv:
    """`openenv init my_env` of the published package (its CLI, in the compat venv). uv is kept
    off PATH: OpenEnv's init would lock the new folder's dependencies, which takes long."""
    cli = str(Path(compat_python).with_name("openenv"))
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(Path(compat_python).parent), "/usr/bin", "/bin"]),
    }
    result = subprocess.run(
        [cli, "init", "my_env", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return LayoutEnv(out / "my_env", "MyEnv", "MyAction", {"message": "hi"})


def our_init(out: Path) -> LayoutEnv:
    """`openenv init my_game` of this package (its default, flat layout)."""
    result = subprocess.run(
        [OUR_OPENENV, "init", "my_game", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return LayoutEnv(out / "my_game", "MyGameEnv", "MyGameAction", {"guess": 50})


def echo_copy(out: Path) -> LayoutEnv:
    """A copy of the echo environment in OpenEnv's layout."""
    root = out / "echo_env"
    shutil.copytree(ECHO_SOURCE, root, ignore=shutil.ignore_patterns("__pycache__"))
    args = {"tool_name": "echo_message", "arguments": {"message": "hi"}}
    return LayoutEnv(root, "EchoEnv", "CallToolAction", args)


def play(python: str, env: LayoutEnv, url: str) -> dict[str, Any]:
    """One episode against `url` with the folder's own client, under `python`'s openenv."""
    result = subprocess.run(
        [
            python,
            str(CLIENT_SCRIPT),
            str(env.root.parent),
            env.package,
            env.client,
            env.action,
            url,
            json.dumps(env.action_args),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": "", "NO_PROXY": "127.0.0.1,localhost"},
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def check_episode(env: LayoutEnv, played: dict[str, Any]) -> None:
    """The step answered what this environment's game says it should."""
    assert played["package_file"].startswith(str(env.root)), played["package_file"]
    step = played["step"]
    observation = step["observation"]
    if env.package == "my_game":  # an unseeded reset: a guess of 50 may be the secret
        assert step["done"] is (observation["hint"] == "correct"), step
    else:
        assert step["done"] is False
    if env.package == "my_env":  # OpenEnv's template: an echo of the message
        assert observation["echoed_message"] == "hi"
        assert observation["message_length"] == 2
        assert played["reset"]["observation"]["echoed_message"]
    elif env.package == "my_game":  # ours: guess the number
        assert observation["last_guess"] == 50
        assert observation["hint"] in {"higher", "lower", "correct"}
        assert played["state"]["step_count"] == 1
    else:  # the echo environment's MCP tools
        assert "hi" in json.dumps(observation), observation
        assert played["tools"] == ["echo_message", "echo_with_length"]
        assert played["call_tool"] == "over call_tool"
