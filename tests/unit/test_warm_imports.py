"""`Environment.warm_imports`: what a fork server imports once so that its forked servers do not
each pay it at their first step (an MCP environment's first tool call imports ~150 ms)."""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

from openenv.providers.zygote import _warm_environment

FIRST_STEP = """
import asyncio, json, sys
from echo_env.server.app import app
from openenv.core.env_server.mcp_types import CallToolAction

factory = app.state.openenv_server.manager.factory
warm = factory()
if sys.argv[1] == "warm":
    warm.warm_imports()
warm.close()
env = factory()
before = set(sys.modules)

async def episode():
    await env.reset_async()
    return await env.step_async(
        CallToolAction(tool_name="echo_message", arguments={"message": "hi"})
    )

observation = asyncio.run(episode())
env.close()
print(json.dumps({"new": sorted(set(sys.modules) - before), "error": observation.error}))
"""


def _first_step_imports(mode: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", FIRST_STEP, mode], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["error"] is None
    return [name for name in report["new"] if not name.startswith("encodings.")]


def test_after_warm_imports_an_mcp_environments_first_step_imports_nothing() -> None:
    cold = _first_step_imports("cold")
    assert any(name.startswith("key_value") for name in cold), cold  # what warming is for
    assert _first_step_imports("warm") == []


class _Env:
    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def warm_imports(self) -> None:
        self.calls.append("warm_imports")

    def close(self) -> None:
        self.calls.append("close")


def test_the_fork_server_warms_an_environment_then_closes_it() -> None:
    calls: list[str] = []
    manager = SimpleNamespace(factory=lambda: _Env(calls))
    app: Any = SimpleNamespace(
        state=SimpleNamespace(openenv_server=SimpleNamespace(manager=manager))
    )
    _warm_environment(app)
    assert calls == ["warm_imports", "close"]


def test_an_environment_without_the_hook_is_still_warmed() -> None:
    closed: list[bool] = []
    env = SimpleNamespace(close=lambda: closed.append(True))  # e.g. an OpenEnv 0.10 environment
    manager = SimpleNamespace(factory=lambda: env)
    app: Any = SimpleNamespace(
        state=SimpleNamespace(openenv_server=SimpleNamespace(manager=manager))
    )
    _warm_environment(app)
    assert closed == [True]
