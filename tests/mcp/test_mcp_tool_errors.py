"""Tool failures are typed by WHAT failed, never by the words of the message."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from mcp.client.streamable_http import streamable_http_client

from mcp import ClientSession
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation
from openenv.core.errors import ToolCallError
from openenv.core.mcp_client import MCPToolClient

# (tool, arguments, expected error_type)
CASES: list[tuple[str, dict[str, Any], str]] = [
    ("lookup", {"key": "k"}, "execution_error"),  # message says "not found in database"
    ("validate", {"text": "x"}, "execution_error"),  # message says "invalid argument"
    ("parse_record", {"raw": "zz"}, "execution_error"),  # the body's own pydantic check failed
    ("add", {"a": "zz", "b": 1}, "invalid_args"),  # wrong type
    ("add", {"a": 1}, "invalid_args"),  # missing argument
    ("add", {"a": 1, "b": 2, "c": 3}, "invalid_args"),  # unexpected argument
    ("slow", {"seconds": 3}, "timeout"),  # the tool's 0.3 s timeout
    ("no_such_tool", {}, "tool_not_found"),
    # Simulation-only mode tools (the server runs in simulation mode) fail the same way.
    ("sim_lookup", {"key": "k"}, "execution_error"),
    ("sim_add", {"a": "zz", "b": 1}, "invalid_args"),
    ("sim_parse", {"raw": "zz"}, "execution_error"),
]
IDS = [f"{name}-{kind}-{i}" for i, (name, _, kind) in enumerate(CASES)]


@pytest.mark.parametrize(("tool", "arguments", "error_type"), CASES, ids=IDS)
async def test_error_type_via_step(tools_server, tool, arguments, error_type):
    client = MCPToolClient(base_url=tools_server.url)
    client.use_production_mode = False  # tools as Gym steps over /ws
    async with client:
        await client.reset()
        result = await client.step(CallToolAction(tool_name=tool, arguments=arguments))
        obs = result.observation
        assert isinstance(obs, CallToolObservation)
        assert obs.error is not None, obs
        assert obs.error.error_type.value == error_type, obs.error.message
        assert obs.result is None
        # The session stays usable after a failed tool call.
        ok = await client.step(CallToolAction(tool_name="add", arguments={"a": 2, "b": 3}))
        assert ok.observation.error is None
        assert ok.observation.result["data"] == 5


@pytest.mark.parametrize(("tool", "arguments", "error_type"), CASES, ids=IDS)
async def test_error_type_via_mcp_jsonrpc(tools_server, tool, arguments, error_type):
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }
    async with httpx.AsyncClient(timeout=10) as http:
        reply = (await http.post(f"{tools_server.url}/mcp", json=body)).json()
    assert "result" not in reply
    error = reply["error"]
    assert error["data"]["error_type"] == error_type, error["message"]
    expected_code = -32602 if error_type in ("invalid_args", "tool_not_found") else -32603
    assert error["code"] == expected_code


@pytest.mark.parametrize(("tool", "arguments", "error_type"), CASES, ids=IDS)
async def test_error_type_via_call_tool_production(tools_server, tool, arguments, error_type):
    async with MCPToolClient(base_url=tools_server.url, mode="production") as client:
        with pytest.raises(ToolCallError) as info:
            await client.call_tool(tool, **arguments)
        assert info.value.error_type == error_type
        assert info.value.tool_name == tool
        expected = "client" if error_type in ("invalid_args", "tool_not_found") else "environment"
        assert info.value.category == expected


async def test_error_type_via_call_tool_simulation(tools_server):
    client = MCPToolClient(base_url=tools_server.url)
    client.use_production_mode = False  # tools as Gym steps over /ws
    async with client:
        for tool, arguments, error_type in CASES:
            with pytest.raises(ToolCallError) as info:
                await client.call_tool(tool, **arguments)
            assert info.value.error_type == error_type, (tool, info.value.message)


async def test_error_type_via_stock_mcp_client(tools_server):
    async with streamable_http_client(f"{tools_server.url}/mcp") as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            for tool, arguments, error_type in CASES:
                if error_type == "tool_not_found":
                    continue  # a protocol error there (see the stock client tests)
                result = await session.call_tool(tool, arguments)
                assert result.is_error is True, tool
                assert (result.meta or {}).get("openenv", {}).get("error_type") == error_type


async def test_timeout_is_bounded_by_the_tool_timeout(tools_server):
    client = MCPToolClient(base_url=tools_server.url)
    client.use_production_mode = False  # tools as Gym steps over /ws
    async with client:
        await client.reset()
        # A call that is not cut off at 0.3 s outlasts the client's own message timeout.
        slow = CallToolAction(tool_name="slow", arguments={"seconds": 600})
        result = await client.step(slow)
        assert result.observation.error.error_type.value == "timeout"
        fast = await client.step(CallToolAction(tool_name="slow", arguments={"seconds": 0.01}))
        assert fast.observation.error is None
        assert fast.observation.result["data"] == "finished"


async def test_step_timeout_s_over_http(tools_server):
    """HTTP /step passes `timeout_s` to the environment: a slower tool call times out."""
    url = tools_server.url
    async with httpx.AsyncClient(timeout=10) as http:
        reset = await http.post(f"{url}/reset", json={}, headers={"X-OpenEnv-Session-Id": "new"})
        sid = reset.json()["session_id"]
        headers = {"X-OpenEnv-Session-Id": sid}
        try:
            # Not cut off at 0.3 s, the call would outlast the HTTP client's 10 s timeout.
            action = {"type": "call_tool", "tool_name": "sleep", "arguments": {"seconds": 600}}
            reply = await http.post(
                f"{url}/step", json={"action": action, "timeout_s": 0.3}, headers=headers
            )
            obs = reply.json()["observation"]
            assert obs["error"]["error_type"] == "timeout"

            action["arguments"] = {"seconds": 0.01}
            reply = await http.post(
                f"{url}/step", json={"action": action, "timeout_s": 1.0}, headers=headers
            )
            obs = reply.json()["observation"]
            assert obs["error"] is None
            assert obs["result"]["data"] == "slept"
        finally:
            await http.delete(f"{url}/sessions/{sid}")
