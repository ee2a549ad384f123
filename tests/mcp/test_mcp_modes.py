"""Mode-aware tools: the server's mode decides which tool variants exist, on every path."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from websockets.asyncio.client import connect

from mcp import ClientSession
from openenv.core.env_server.mcp_types import CallToolAction, ListToolsAction
from openenv.core.errors import ToolCallError
from openenv.core.generic_client import GenericEnvClient
from openenv.core.mcp_client import MCPToolClient

# mode -> (tool of this mode, tool of the other mode, what `fetch` answers)
MODES = {
    "simulation": ("sim_search", "live_search", "item@simulation", "simulated:q"),
    "production": ("live_search", "sim_search", "item@production", "live:q"),
}


@pytest.fixture(params=["simulation", "production"])
def moded(request) -> tuple[str, Any]:
    mode = request.param
    server = request.getfixturevalue(f"{mode}_server")
    return mode, server


def _rpc(method: str, params: dict[str, Any] | None = None, rid: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params or {}}


async def test_step_list_and_call_over_ws(moded):
    mode, server = moded
    own, other, fetched, searched = MODES[mode]
    client = MCPToolClient(base_url=server.url)
    client.use_production_mode = False  # tools as Gym steps over /ws
    async with client:
        await client.reset()
        listed = await client.step(ListToolsAction())
        names = {t.name for t in listed.observation.tools}
        assert names == {"ping", own, "fetch"}
        assert other not in names
        schema = next(t for t in listed.observation.tools if t.name == own).input_schema
        assert schema["properties"]["query"]["type"] == "string"

        result = await client.step(CallToolAction(tool_name=own, arguments={"query": "q"}))
        assert result.observation.error is None
        assert result.observation.result["data"] == searched
        result = await client.step(CallToolAction(tool_name="fetch", arguments={"item": "item"}))
        assert result.observation.result["data"] == fetched

        result = await client.step(CallToolAction(tool_name=other, arguments={"query": "q"}))
        assert result.observation.error is not None
        assert result.observation.error.error_type.value == "tool_not_found"
        assert (await client.state()).step_count == 4


async def test_jsonrpc_list_and_call(moded):
    mode, server = moded
    own, other, fetched, searched = MODES[mode]
    async with httpx.AsyncClient(timeout=10) as http:
        url = f"{server.url}/mcp"
        sid = (await http.post(url, json=_rpc("openenv/session/create"))).json()["result"][
            "session_id"
        ]
        try:
            for params in ({}, {"session_id": sid}):  # stateless and in a session
                listed = (await http.post(url, json=_rpc("tools/list", params))).json()
                names = {t["name"] for t in listed["result"]["tools"]}
                assert names == {"ping", own, "fetch"}, params
                call = {**params, "name": own, "arguments": {"query": "q"}}
                reply = (await http.post(url, json=_rpc("tools/call", call))).json()
                assert reply["result"]["data"] == searched
                call = {**params, "name": "fetch", "arguments": {"item": "item"}}
                reply = (await http.post(url, json=_rpc("tools/call", call))).json()
                assert reply["result"]["data"] == fetched
                call = {**params, "name": other, "arguments": {"query": "q"}}
                reply = (await http.post(url, json=_rpc("tools/call", call))).json()
                assert reply["error"]["data"]["error_type"] == "tool_not_found"
        finally:
            await http.post(url, json=_rpc("openenv/session/close", {"session_id": sid}))


async def test_stock_mcp_client(moded):
    mode, server = moded
    own, other, fetched, searched = MODES[mode]
    async with streamable_http_client(f"{server.url}/mcp") as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            names = {t.name for t in (await session.list_tools()).tools}
            assert names == {"ping", own, "fetch"}
            result = await session.call_tool(own, {"query": "q"})
            assert result.is_error is False
            assert result.content[0].text == searched
            result = await session.call_tool("fetch", {"item": "item"})
            assert result.content[0].text == fetched
            try:
                result = await session.call_tool(other, {"query": "q"})
            except MCPError as exc:
                assert exc.error.code == -32602
            else:
                assert result.is_error is True


async def test_mcp_over_ws_paths(moded):
    mode, server = moded
    own, other, fetched, searched = MODES[mode]
    # {"type":"mcp"} over /ws
    async with GenericEnvClient(base_url=server.url) as client:
        listed = await client.mcp_request("tools/list")
        assert {t["name"] for t in listed["result"]["tools"]} == {"ping", own, "fetch"}
        reply = await client.mcp_request("tools/call", {"name": own, "arguments": {"query": "q"}})
        assert reply["result"]["data"] == searched
        reply = await client.mcp_request("tools/call", {"name": other, "arguments": {"query": "q"}})
        assert reply["error"]["data"]["error_type"] == "tool_not_found"
    # WS /mcp
    async with connect(server.url.replace("http://", "ws://") + "/mcp") as ws:
        await ws.send(json.dumps(_rpc("tools/list")))
        listed = json.loads(await ws.recv())
        assert {t["name"] for t in listed["result"]["tools"]} == {"ping", own, "fetch"}
        await ws.send(
            json.dumps(_rpc("tools/call", {"name": "fetch", "arguments": {"item": "item"}}, 2))
        )
        assert json.loads(await ws.recv())["result"]["data"] == fetched


async def test_mcp_tool_client_over_both_transports(moded):
    mode, server = moded
    own, other, fetched, searched = MODES[mode]
    for over_http in (True, False):  # tools over HTTP /mcp, then as Gym steps over /ws
        client = MCPToolClient(base_url=server.url)
        client.use_production_mode = over_http
        async with client:
            names = {t.name for t in await client.list_tools(use_cache=False)}
            assert names == {"ping", own, "fetch"}, over_http
            assert await client.call_tool(own, query="q") == searched
            assert await client.call_tool("fetch", item="item") == fetched
            with pytest.raises(ToolCallError) as info:
                await client.call_tool(other, query="q")
            assert info.value.error_type == "tool_not_found"


async def test_default_mode_is_simulation(default_mode_server):
    url = default_mode_server.url
    async with httpx.AsyncClient(timeout=10) as http:
        listed = (await http.post(f"{url}/mcp", json=_rpc("tools/list"))).json()
        assert {t["name"] for t in listed["result"]["tools"]} == {"ping", "sim_search", "fetch"}
        assert (await http.post(f"{url}/reset", json={})).status_code == 200


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/reset", {}),
        ("POST", "/step", {"action": {"type": "list_tools"}}),
        ("GET", "/state", None),
    ],
)
async def test_production_hides_the_http_simulation_routes(
    production_server, simulation_server, method, path, body
):
    async with httpx.AsyncClient(timeout=10) as http:
        prod = await http.request(method, f"{production_server.url}{path}", json=body)
        assert prod.status_code == 404
        sim = await http.request(method, f"{simulation_server.url}{path}", json=body)
        assert sim.status_code == 200


async def test_production_keeps_ws_and_the_info_routes(production_server):
    url = production_server.url
    async with GenericEnvClient(base_url=url) as client:
        reset = await client.reset(episode_id="prod-episode")
        assert reset.metadata == {"mode": "production"}
        step = await client.step({"type": "call_tool", "tool_name": "ping", "arguments": {}})
        assert step.observation["result"]["data"] == "pong"
        state = await client.state()
        assert state["episode_id"] == "prod-episode"
        assert state["step_count"] == 1
    async with httpx.AsyncClient(timeout=10) as http:
        for path in ("/health", "/metadata", "/schema", "/capacity"):
            assert (await http.get(f"{url}{path}")).status_code == 200, path


async def test_simulation_reset_reports_the_mode(simulation_server):
    async with GenericEnvClient(base_url=simulation_server.url) as client:
        assert (await client.reset()).metadata == {"mode": "simulation"}


def test_empty_openenv_mode_means_the_default(monkeypatch):
    """An empty OPENENV_MODE is treated like an unset one (as empty numeric settings are)."""
    from openenv.core.env_server import CallToolObservation, create_app
    from tests.mcp_apps.modes import ModesEnvironment

    monkeypatch.setenv("OPENENV_MODE", "")
    app = create_app(ModesEnvironment, CallToolAction, CallToolObservation)
    assert app.state.openenv_server.mode.value == "simulation"
