"""The echo env over raw `/ws` and HTTP, as an OpenEnv client drives it (reference 2.11)."""

from __future__ import annotations

import httpx

from tests.support.server import RunningServer

from .helpers import assert_observation_frame, request, ws_connect


async def test_call_tool_over_ws(echo_server: RunningServer) -> None:
    async with ws_connect(echo_server.ws_url) as ws:
        reset = assert_observation_frame(
            await request(ws, {"type": "reset", "data": {"episode_id": "ep-1"}})
        )
        assert reset["done"] is False
        frame = await request(
            ws,
            {
                "type": "step",
                "data": {
                    "type": "call_tool",
                    "tool_name": "echo_message",
                    "arguments": {"message": "Hi"},
                },
            },
        )
        data = assert_observation_frame(frame)
        obs = data["observation"]
        assert obs["tool_name"] == "echo_message"
        assert obs["error"] is None
        assert obs["result"]["data"] == "Hi"
        assert obs["result"]["is_error"] is False
        assert obs["result"]["content"][0]["text"] == "Hi"
        state = await request(ws, {"type": "state"})
        assert state == {"type": "state", "data": {"episode_id": "ep-1", "step_count": 1}}


async def test_list_tools_over_ws(echo_server: RunningServer) -> None:
    async with ws_connect(echo_server.ws_url) as ws:
        data = assert_observation_frame(
            await request(ws, {"type": "step", "data": {"type": "list_tools"}})
        )
        tools = {tool["name"]: tool for tool in data["observation"]["tools"]}
        assert {"echo_message", "echo_with_length"} <= set(tools)
        schema = tools["echo_message"]["input_schema"]
        assert schema["type"] == "object"
        assert schema["properties"]["message"]["type"] == "string"
        assert schema["required"] == ["message"]
        assert isinstance(tools["echo_message"]["description"], str)


async def test_unknown_tool_is_an_observation_not_an_error(echo_server: RunningServer) -> None:
    async with ws_connect(echo_server.ws_url) as ws:
        data = assert_observation_frame(
            await request(ws, {"type": "step", "data": {"type": "call_tool", "tool_name": "nope"}})
        )
        assert data["observation"]["result"] is None
        assert data["observation"]["error"]["error_type"] == "tool_not_found"


async def test_call_tool_over_http(echo_server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=echo_server.url) as http:
        response = await http.post(
            "/step",
            json={
                "action": {
                    "type": "call_tool",
                    "tool_name": "echo_message",
                    "arguments": {"message": "Hi"},
                }
            },
        )
        assert response.status_code == 200, response.text
        assert response.json()["observation"]["result"]["data"] == "Hi"
        bad = await http.post("/step", json={"action": {"tool_name": "x", "bogus": 1}})
        assert bad.status_code == 422
        assert [err["loc"] for err in bad.json()["detail"]] == [["bogus"]]


async def test_mcp_frame_over_ws(echo_server: RunningServer) -> None:
    async with ws_connect(echo_server.ws_url) as ws:
        frame = await request(
            ws,
            {
                "type": "mcp",
                "id": "m1",
                "data": {
                    "jsonrpc": "2.0",
                    "id": 3,
                    "method": "tools/call",
                    "params": {"name": "echo_message", "arguments": {"message": "yo"}},
                },
            },
        )
        assert frame["type"] == "mcp" and frame["id"] == "m1"
        assert frame["data"]["jsonrpc"] == "2.0" and frame["data"]["id"] == 3
        assert frame["data"]["result"]["data"] == "yo"
