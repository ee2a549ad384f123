"""OpenEnv-style code for MCP tools and types, run with either package; prints JSON results.

Run by tests/compat/test_mcp_tools_api.py twice, with our venv's python and with the compat venv's
(openenv==0.10.0): `<python> mcp_api_snippets.py`. It uses only OpenEnv's public names, the way its
docs and docstrings use them, so both runs can be compared key by key.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from fastmcp import FastMCP

from openenv.core.env_server import (
    Action,
    JsonRpcError,
    JsonRpcErrorCode,
    JsonRpcResponse,
    ListToolsAction,
    MCPEnvironment,
    WSMCPMessage,
    WSMCPResponse,
    deserialize_action_with_preprocessing,
)
from openenv.core.env_server.mcp_types import CallToolAction
from openenv.core.env_server.serialization import (
    deserialize_action_with_preprocessing as from_serialization,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from counter_server import CounterEnvironment


def _outcome(fn: Any) -> Any:
    """The value, or the exception's type and whether its message names GenericEnvClient."""
    try:
        value = fn()
    except Exception as exc:
        return {"raised": type(exc).__name__, "names_generic": "GenericEnvClient" in str(exc)}
    return value if isinstance(value, dict) else type(value).__name__


def _error(fn: Any) -> Any:
    try:
        fn()
    except Exception as exc:
        return type(exc).__name__
    return None


class PickAction(Action):
    action_id: int
    tokens: list[int] = []


def types() -> dict[str, Any]:
    bad_json = {"type": "call_tool", "tool_name": "t", "arguments": "{not json"}
    return {
        "from_code": {c.name: JsonRpcError.from_code(c).model_dump() for c in JsonRpcErrorCode},
        "from_code_given": JsonRpcError.from_code(
            JsonRpcErrorCode.INVALID_PARAMS, "no such session", {"session_id": "s"}
        ).model_dump(),
        "from_code_extra": _error(lambda: JsonRpcError(code=1, message="m", bogus=1)),
        "success": JsonRpcResponse.success({"tools": []}, request_id=7).model_dump(),
        "success_null": JsonRpcResponse.success(None).model_dump(),
        "error_response": JsonRpcResponse.error_response(
            JsonRpcErrorCode.METHOD_NOT_FOUND, request_id="a"
        ).model_dump(),
        "error_response_json": json.loads(
            JsonRpcResponse.error_response(
                JsonRpcErrorCode.INTERNAL_ERROR, "boom", data={"x": 1}, request_id=2
            ).model_dump_json()
        ),
        "ws_mcp_message": WSMCPMessage(data={"method": "tools/list"}).model_dump(exclude_none=True),
        "ws_mcp_message_extra": _error(lambda: WSMCPMessage(data={}, bogus=1)),
        "ws_mcp_response": WSMCPResponse(data={"result": {}}).model_dump(exclude_none=True),
        "same_function": from_serialization is deserialize_action_with_preprocessing,
        "pre_call_tool_text": deserialize_action_with_preprocessing(
            {"type": "call_tool", "tool_name": "t", "arguments": '{"a": 1}'}, Action
        ).model_dump(),
        "pre_call_tool_bad_text": _error(
            lambda: deserialize_action_with_preprocessing(bad_json, Action)
        ),
        "pre_list_tools": type(
            deserialize_action_with_preprocessing({"type": "list_tools"}, Action)
        ).__name__,
        "pre_action_id": deserialize_action_with_preprocessing(
            {"action_id": "3", "tokens": "[1, 2]"}, PickAction
        ).model_dump(),
        "pre_action_id_bad": _error(
            lambda: deserialize_action_with_preprocessing({"action_id": "x"}, PickAction)
        ),
        "pre_tokens_bad_text": _outcome(
            lambda: deserialize_action_with_preprocessing(
                {"action_id": 1, "tokens": "1, 2"}, PickAction
            ).model_dump()
        ),
    }


def client() -> dict[str, Any]:
    import inspect

    from openenv.core.mcp_client import MCPClientBase, MCPToolClient

    def params(cls: type) -> list[str]:
        found = inspect.signature(cls.__init__).parameters.values()
        return [p.name for p in found if p.kind is not p.VAR_KEYWORD]

    env = MCPToolClient(base_url="http://127.0.0.1:9", mode="production")
    env.use_production_mode = True  # the seed FAQ's workaround
    flag = env.use_production_mode
    env.use_production_mode = False
    return {
        "params_base": params(MCPClientBase),
        "params_tool": params(MCPToolClient),
        "use_production_mode": [flag, env.use_production_mode],
        "default_flag": MCPToolClient(base_url="http://127.0.0.1:9").use_production_mode,
        "mode_simulation": _outcome(
            lambda: MCPToolClient(base_url="http://127.0.0.1:9", mode="simulation")
        ),
        "methods": sorted(
            name
            for name in ("list_tools", "call_tool", "get_tool", "has_tool", "sync", "close")
            if callable(getattr(env, name, None))
        ),
    }


def tools() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("reset", "step", "state", "close"):
        mcp = FastMCP("reserved")
        mcp.tool(lambda: "x", name=name)

        out[f"reserved_{name}"] = _error(
            lambda mcp=mcp: MCPEnvironment.__init__(
                CounterEnvironment.__new__(CounterEnvironment), mcp
            )
        )
    adder = FastMCP("adder")

    @adder.tool
    def add(a: int, b: int) -> int:
        return a + b

    coder = CounterEnvironment.__new__(CounterEnvironment)
    MCPEnvironment.__init__(coder, adder)
    out["supports_code_mode"] = coder.supports_code_mode
    out["callables"] = sorted(coder.get_callables())
    out["code_result"] = coder.execute_code("result = add(2, 3)").model_dump()
    out["code_syntax_error"] = coder.execute_code("result = (").model_dump()
    out["code_error"] = coder.execute_code("result = add(1)").model_dump()

    env = CounterEnvironment()

    def reset() -> str:
        return "x"

    out["decorator_reserved"] = _error(lambda: env.tool()(reset))
    listed = env.step(ListToolsAction())
    out["listed"] = [t.name for t in listed.tools]
    first = env.step(CallToolAction(tool_name="bump", arguments={}))
    second = env.step(CallToolAction(tool_name="bump", arguments={}))
    out["result_type"] = f"{type(first.result).__module__}.{type(first.result).__name__}"
    out["result_data"] = first.result.data
    out["dump"] = first.model_dump(mode="json")
    out["counts_in_process"] = [first.result.data, second.result.data]
    out["fresh_env"] = CounterEnvironment().step(CallToolAction(tool_name="bump")).result.data
    return out


if __name__ == "__main__":
    print(json.dumps({"types": types(), "tools": tools(), "client": client()}))
