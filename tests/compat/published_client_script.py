"""Drive an echo server with the *published* OpenEnv clients (openenv==0.10.0).

Run by tests/compat/test_published_client.py with the compat venv's python:
`<compat-python> published_client_script.py http://127.0.0.1:PORT`. It imports only the published
package, runs every check (one failing check does not stop the others) and prints one JSON object
on stdout: {check_name: {...observations...} or {"error": "...", "traceback": "..."}}.
"""

from __future__ import annotations

import asyncio
import json
import sys
import traceback
from collections.abc import Callable
from typing import Any

from openenv.core import GenericEnvClient, MCPToolClient, SyncEnvClient
from openenv.core.env_server.mcp_types import (
    CallToolAction,
    CallToolObservation,
    ListToolsAction,
    ListToolsObservation,
)

BAD_ACTION = {"message": "not a CallToolAction"}


def _call_echo(message: str) -> dict[str, Any]:
    return {"type": "call_tool", "tool_name": "echo_message", "arguments": {"message": message}}


def _error_text(fn: Callable[[], Any]) -> dict[str, Any]:
    try:
        fn()
    except Exception as exc:
        return {
            "type": type(exc).__name__,
            "is_runtime_error": isinstance(exc, RuntimeError),
            "message": str(exc),
        }
    return {"type": None, "message": "no exception raised"}


async def _async_error_text(coro: Any) -> dict[str, Any]:
    try:
        await coro
    except Exception as exc:
        return {
            "type": type(exc).__name__,
            "is_runtime_error": isinstance(exc, RuntimeError),
            "message": str(exc),
        }
    return {"type": None, "message": "no exception raised"}


def _result(r: Any) -> dict[str, Any]:
    return {
        "observation": r.observation,
        "reward": r.reward,
        "done": r.done,
        "metadata": r.metadata,
    }


async def generic_async(base: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with GenericEnvClient(base_url=base) as env:
        out["reset"] = _result(await env.reset(episode_id="ep-generic"))
        out["step"] = _result(await env.step(_call_echo("hello async")))
        step2 = await env.step(
            CallToolAction(tool_name="echo_with_length", arguments={"message": "abc"})
        )
        out["step_model_data"] = step2.observation["result"]["data"]
        out["unknown_tool"] = (
            await env.step({"type": "call_tool", "tool_name": "nope", "arguments": {}})
        ).observation
        out["state"] = await env.state()
        out["invalid_action"] = await _async_error_text(env.step(BAD_ACTION))
        out["state_after_error"] = await env.state()
        out["step_after_error"] = (await env.step(_call_echo("again"))).observation["result"][
            "data"
        ]
    return out


def generic_sync(base: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with GenericEnvClient(base_url=base).sync() as env:
        out["is_sync_client"] = isinstance(env, SyncEnvClient)
        out["reset"] = _result(env.reset(episode_id="ep-sync"))
        out["step"] = _result(env.step(_call_echo("hello sync")))
        out["state"] = env.state()
        out["invalid_action"] = _error_text(lambda: env.step(BAD_ACTION))
        out["state_after_error"] = env.state()
    return out


def generic_autodispatch(base: str) -> dict[str, Any]:
    """Plain sync calls (no .sync(), no await) and a bare host:port base URL."""
    out: dict[str, Any] = {}
    env = GenericEnvClient(base_url=base.replace("http://", ""))
    try:
        out["reset"] = _result(env.reset())
        out["step_data"] = env.step(_call_echo("auto")).observation["result"]["data"]
        out["state"] = env.state()
    finally:
        env.close()
    return out


async def mcp_async(base: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with MCPToolClient(base_url=base) as env:
        out["use_production_mode"] = env.use_production_mode
        out["session_id"] = env._production_session_id
        reset = await env.reset(episode_id="ep-mcp")
        out["reset_observation_type"] = type(reset.observation).__name__
        out["reset_observation_metadata"] = reset.observation.metadata
        out["reset_metadata"] = reset.metadata
        tools = await env.list_tools(use_cache=False)
        out["tools"] = {
            t.name: {"description": t.description, "input_schema": t.input_schema} for t in tools
        }
        out["call_echo_message"] = await env.call_tool("echo_message", message="Hello!")
        out["call_echo_with_length"] = await env.call_tool("echo_with_length", message="Hello!")
        out["call_unknown_tool"] = await _async_error_text(env.call_tool("nope"))
        out["call_bad_args"] = await _async_error_text(env.call_tool("echo_message", wrong="x"))
        state = await env.state()
        out["state_after_call_tool"] = {
            "episode_id": state.episode_id,
            "step_count": state.step_count,
        }
        step = await env.step(
            CallToolAction(tool_name="echo_message", arguments={"message": "via step"})
        )
        out["step_is_call_tool_observation"] = isinstance(step.observation, CallToolObservation)
        out["step_result"] = step.observation.result
        out["step_error"] = step.observation.error
        out["step_reward"] = step.reward
        step = await env.step(ListToolsAction())
        out["list_step_is_list_tools_observation"] = isinstance(
            step.observation, ListToolsObservation
        )
        out["list_step_tools"] = sorted(t.name for t in step.observation.tools)
        state = await env.state()
        out["state_after_steps"] = {"episode_id": state.episode_id, "step_count": state.step_count}
    out["closed_session_id"] = env._production_session_id
    return out


def mcp_sync(base: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with MCPToolClient(base_url=base).sync() as env:
        out["is_sync_client"] = isinstance(env, SyncEnvClient)
        reset = env.reset()
        out["reset_metadata"] = reset.metadata
        out["tools"] = sorted(t.name for t in env.list_tools())
        out["call_echo_message"] = env.call_tool("echo_message", message="sync hi")
        out["call_unknown_tool"] = _error_text(lambda: env.call_tool("nope"))
        step = env.step(CallToolAction(tool_name="echo_message", arguments={"message": "s"}))
        out["step_result_data"] = (step.observation.result or {}).get("data")
        state = env.state()
        out["state"] = {"episode_id": state.episode_id, "step_count": state.step_count}
    return out


CHECKS: dict[str, Callable[[str], Any]] = {
    "generic_async": lambda base: asyncio.run(generic_async(base)),
    "generic_sync": generic_sync,
    "generic_autodispatch": generic_autodispatch,
    "mcp_async": lambda base: asyncio.run(mcp_async(base)),
    "mcp_sync": mcp_sync,
}


def main() -> None:
    base = sys.argv[1]
    results: dict[str, Any] = {}
    for name, check in CHECKS.items():
        try:
            results[name] = check(base)
        except Exception as exc:
            results[name] = {
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(),
            }
    print(
        json.dumps(
            results, default=lambda o: o.model_dump() if hasattr(o, "model_dump") else repr(o)
        )
    )


if __name__ == "__main__":
    main()
