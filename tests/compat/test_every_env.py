"""PUBLISHED CLIENT -> EVERY environment under envs/.

Each environment package under envs/ (found by its openenv.yaml, so a new one is covered without
editing this file) is served, and the published `GenericEnvClient` (compat venv,
openenv==0.10.0) does `reset(seed=0)`, one step with the environment's own sample action and
`state()` in one run of published_every_env_script.py. The sample action is chosen the way
`openenv.testing` chooses it: the action schema's declared examples, else a `call_tool` of the
first MCP tool, else one generated from the action schema. Every reply must have the shape the
server's `/schema` declares.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from openenv.core.env_server.types import Observation
from openenv.core.manifest import load_manifest
from openenv.testing._jsonutil import validate
from openenv.testing.samples import (
    declared_samples,
    sample_actions_from_schema,
    tool_call_samples,
)
from tests.support.envs import env_params, installed
from tests.support.server import REPO, serve

pytestmark = pytest.mark.compat

SCRIPT = Path(__file__).resolve().parent / "published_every_env_script.py"
ENVS = REPO / "envs"


def env_folders() -> list[Path]:
    return sorted(p for p in ENVS.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))


ENV_NAMES = [p.name for p in env_folders()]
BASE_OBSERVATION = Observation.model_json_schema() | {"additionalProperties": True}


def mcp_tools(url: str) -> list[dict[str, Any]]:
    """The tools an MCP environment lists on POST /mcp (none for the others)."""
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    reply = httpx.post(f"{url}/mcp", json=rpc, timeout=30)
    if reply.status_code != 200:
        return []
    return list((reply.json().get("result") or {}).get("tools") or [])


def sample_action(action_schema: dict[str, Any], tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The first sample action `openenv.testing`'s checker would play."""
    declared = declared_samples(action_schema)
    if declared:
        return declared[0]
    if tools:
        return tool_call_samples(tools, 1)[0]
    return sample_actions_from_schema(action_schema, 1)[0]


@pytest.fixture(scope="module")
def visited(compat_python: str) -> Iterator[dict[str, Any]]:
    """{env: {"schema": /schema, "action": sample, "seen": what the published client saw}}."""
    targets: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        for folder in env_folders():
            if not installed(folder.name):
                continue  # skipped by name below, with the reason
            server = stack.enter_context(serve(load_manifest(folder).app))
            schema = httpx.get(f"{server.url}/schema", timeout=30).json()
            tools = mcp_tools(server.url)
            targets[folder.name] = {
                "url": server.url,
                "schema": schema,
                "mcp": bool(tools),
                "action": sample_action(schema["action"], tools),
            }
        proc = subprocess.run(
            [compat_python, str(SCRIPT), json.dumps(targets)],
            capture_output=True,
            text=True,
            timeout=180,
            cwd=SCRIPT.parent,  # not the repo root: nothing of ours is importable
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout)
    yield {name: {**target, "seen": seen[name]} for name, target in targets.items()}


def test_every_folder_is_an_environment() -> None:
    """A folder under envs/ without openenv.yaml would silently escape this suite."""
    assert ENV_NAMES
    assert [n for n in ENV_NAMES if not (ENVS / n / "openenv.yaml").is_file()] == []


def _check_result(result: dict[str, Any], observation_schema: dict[str, Any]) -> None:
    assert result["types"] == ["StepResult", "dict"]
    assert isinstance(result["done"], bool)
    assert result["reward"] is None or isinstance(result["reward"], (int, float))
    assert validate(result["observation"], observation_schema) == []


@pytest.mark.parametrize("name", env_params(ENV_NAMES))
def test_published_client_resets_steps_and_reads_state(visited: dict[str, Any], name: str) -> None:
    env = visited[name]
    seen = env["seen"]
    assert "error" not in seen, f"{name} raised:\n{seen.get('traceback')}"
    # An MCP environment's schema describes its tool-call observation; its reset observation
    # is a plain Observation, as in OpenEnv's MCP environments.
    _check_result(seen["reset"], BASE_OBSERVATION if env["mcp"] else env["schema"]["observation"])
    assert seen["reset"]["done"] is False
    _check_result(seen["step"], env["schema"]["observation"])
    state = seen["state"]
    assert seen["state_type"] == "dict"
    assert validate(state, env["schema"]["state"]) == []
    assert isinstance(state["episode_id"], str) and state["step_count"] == 1
