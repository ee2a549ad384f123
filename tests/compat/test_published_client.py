"""PUBLISHED CLIENT -> OUR SERVER.

published_client_script.py runs in the compat venv (openenv==0.10.0) and drives an echo server with
the published `GenericEnvClient`, `MCPToolClient` and their `.sync()` wrappers; it prints its
observations as JSON. It runs against our echo server (`ours`) and, as the reference, against the
published package's own echo server (`published`): both must meet the same expectations, so a test
failing only for `ours` is an incompatibility of our server.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.server import REPO, RunningServer

pytestmark = pytest.mark.compat

SCRIPT = Path(__file__).resolve().parent / "published_client_script.py"
READY = {"status": "ready", "message": "Echo environment ready!"}
TOOLS = ["echo_message", "echo_with_length"]
TARGETS = ["ours", "published"]
SCRIPT_TIMEOUT_S = 90


@pytest.fixture(scope="module")
def script_results(
    compat_python: str, our_server: RunningServer, published_server: RunningServer
) -> dict[str, dict[str, Any]]:
    """Run the script against both servers at once; {target: {check: observations}}."""
    urls = {"ours": our_server.url, "published": published_server.url}
    procs = {
        target: subprocess.Popen(
            [compat_python, str(SCRIPT), url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=SCRIPT.parent,  # not the repo root: nothing of ours is importable
        )
        for target, url in urls.items()
    }
    results: dict[str, dict[str, Any]] = {}
    for target, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=SCRIPT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"published client script timed out against {target}:\n{err[-3000:]}")
        if proc.returncode != 0:
            pytest.fail(f"published client script crashed against {target}:\n{err[-3000:]}")
        results[target] = json.loads(out)
    return results


def check(results: dict[str, dict[str, Any]], target: str, name: str) -> dict[str, Any]:
    result = results[target][name]
    assert "error" not in result, f"{name} against {target} raised:\n{result.get('traceback')}"
    return result


def test_script_does_not_import_our_package(compat_python: str) -> None:
    """The script's interpreter sees the published package, not ours (same distribution name)."""
    out = subprocess.run(
        [
            compat_python,
            "-c",
            "import openenv, importlib.metadata as m; "
            "print(m.version('openenv')); print(openenv.__file__)",
        ],
        capture_output=True,
        text=True,
        cwd=SCRIPT.parent,
        timeout=60,
        check=True,
    ).stdout.split("\n")
    assert out[0] == "0.10.0"
    assert not out[1].startswith(str(REPO / "src"))


# -- GenericEnvClient (WebSocket /ws, plain protocol) ---------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_generic_async_episode(script_results: dict[str, Any], target: str) -> None:
    r = check(script_results, target, "generic_async")
    assert r["reset"]["reward"] == 0.0
    assert r["reset"]["done"] is False
    assert r["reset"]["metadata"] == READY
    assert r["step"]["observation"]["tool_name"] == "echo_message"
    assert r["step"]["observation"]["result"]["data"] == "hello async"
    assert r["step"]["observation"]["error"] is None
    assert r["step"]["reward"] is None
    assert r["step"]["done"] is False
    assert r["step_model_data"] == {"message": "abc", "length": 3}
    assert r["unknown_tool"]["result"] is None
    assert r["unknown_tool"]["error"]["error_type"] == "tool_not_found"
    assert r["state"] == {"episode_id": "ep-generic", "step_count": 3}


@pytest.mark.parametrize("target", TARGETS)
def test_generic_observation_keeps_metadata(script_results: dict[str, Any], target: str) -> None:
    """OpenEnv leaves `metadata` inside the observation dict too (and copies it to the top level
    when non-empty); GenericEnvClient users read `result.observation["metadata"]`."""
    r = check(script_results, target, "generic_async")
    assert r["reset"]["observation"].get("metadata") == READY
    assert r["step"]["observation"].get("metadata") == {}


@pytest.mark.parametrize("target", TARGETS)
def test_generic_invalid_action_is_validation_error(
    script_results: dict[str, Any], target: str
) -> None:
    r = check(script_results, target, "generic_async")
    err = r["invalid_action"]
    assert err["is_runtime_error"], err
    assert "VALIDATION_ERROR" in err["message"]
    assert err["message"] == "Server error: Invalid message (code: VALIDATION_ERROR)"
    # The connection stays usable and the failed step did not count.
    assert r["state_after_error"] == {"episode_id": "ep-generic", "step_count": 3}
    assert r["step_after_error"] == "again"


@pytest.mark.parametrize("target", TARGETS)
def test_generic_sync_wrapper(script_results: dict[str, Any], target: str) -> None:
    r = check(script_results, target, "generic_sync")
    assert r["is_sync_client"] is True
    assert r["reset"]["metadata"] == READY
    assert r["step"]["observation"]["result"]["data"] == "hello sync"
    assert r["state"] == {"episode_id": "ep-sync", "step_count": 1}
    assert "VALIDATION_ERROR" in r["invalid_action"]["message"]
    assert r["invalid_action"]["is_runtime_error"]
    assert r["state_after_error"] == {"episode_id": "ep-sync", "step_count": 1}


@pytest.mark.parametrize("target", TARGETS)
def test_generic_autodispatch_bare_host_port(script_results: dict[str, Any], target: str) -> None:
    r = check(script_results, target, "generic_autodispatch")
    assert r["reset"]["metadata"] == READY
    assert r["step_data"] == "auto"
    assert r["state"]["step_count"] == 1


# -- MCPToolClient (HTTP /mcp session + WebSocket /ws?session_id=) ---------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_mcp_session_and_reset(script_results: dict[str, Any], target: str) -> None:
    r = check(script_results, target, "mcp_async")
    assert r["use_production_mode"] is True
    assert r["session_id"]  # openenv/session/create answered with a session id
    assert r["reset_observation_type"] == "GenericMCPObservation"
    assert r["reset_observation_metadata"] == READY
    assert r["reset_metadata"] == READY
    assert r["closed_session_id"] is None


@pytest.mark.parametrize("target", TARGETS)
def test_mcp_list_tools(script_results: dict[str, Any], target: str) -> None:
    r = check(script_results, target, "mcp_async")
    # list_tools() swallows every error into []: an empty list means the call failed.
    assert sorted(r["tools"]) == TOOLS
    echo = r["tools"]["echo_message"]
    assert echo["description"] == "Echo back the provided message."
    assert echo["input_schema"]["properties"]["message"]["type"] == "string"
    assert echo["input_schema"]["required"] == ["message"]
    assert r["list_step_is_list_tools_observation"] is True
    assert r["list_step_tools"] == TOOLS


@pytest.mark.parametrize("target", TARGETS)
def test_mcp_call_tool_returns_value(script_results: dict[str, Any], target: str) -> None:
    r = check(script_results, target, "mcp_async")
    assert r["call_echo_message"] == "Hello!"
    assert r["call_echo_with_length"] == {"message": "Hello!", "length": 6}


@pytest.mark.parametrize("target", TARGETS)
def test_mcp_call_tool_errors(script_results: dict[str, Any], target: str) -> None:
    r = check(script_results, target, "mcp_async")
    assert r["call_unknown_tool"]["is_runtime_error"]
    assert r["call_unknown_tool"]["message"] == "Tool 'nope' failed: Unknown tool: 'nope'"
    assert r["call_bad_args"]["is_runtime_error"]
    assert r["call_bad_args"]["message"].startswith("Tool 'echo_message' failed: ")


@pytest.mark.parametrize("target", TARGETS)
def test_mcp_step_and_state(script_results: dict[str, Any], target: str) -> None:
    """Tool calls over /mcp run in the WebSocket's session but are not env steps."""
    r = check(script_results, target, "mcp_async")
    assert r["state_after_call_tool"] == {"episode_id": "ep-mcp", "step_count": 0}
    assert r["step_is_call_tool_observation"] is True
    assert r["step_result"]["data"] == "via step"
    assert r["step_error"] is None
    assert r["step_reward"] is None
    assert r["state_after_steps"] == {"episode_id": "ep-mcp", "step_count": 2}


@pytest.mark.parametrize("target", TARGETS)
def test_mcp_sync_wrapper(script_results: dict[str, Any], target: str) -> None:
    r = check(script_results, target, "mcp_sync")
    assert r["is_sync_client"] is True
    assert r["reset_metadata"] == READY
    assert r["tools"] == TOOLS
    assert r["call_echo_message"] == "sync hi"
    assert r["call_unknown_tool"]["is_runtime_error"]
    assert "Unknown tool" in r["call_unknown_tool"]["message"]
    assert r["step_result_data"] == "s"
    assert r["state"]["step_count"] == 1


def test_published_clients_release_our_sessions(
    script_results: dict[str, Any], our_server: RunningServer
) -> None:
    """After the published clients closed (WS close frame, openenv/session/close), our server
    holds no session: nothing leaked a capacity slot."""
    assert script_results["ours"]
    capacity = httpx.get(f"{our_server.url}/capacity", timeout=5).json()
    assert capacity["active_sessions"] == 0, capacity
