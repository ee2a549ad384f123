"""MCPToolClient picks its transport by mode; a request-logging middleware proves which one."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from openenv.core.mcp_client import MCPToolClient


async def _log(url: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(timeout=5) as http:
        return (await http.get(f"{url}/_log")).json()


async def _clear(url: str) -> None:
    async with httpx.AsyncClient(timeout=5) as http:
        assert (await http.delete(f"{url}/_log")).status_code == 200


def _mcp_posts(log: list[dict[str, Any]]) -> list[str]:
    return [
        method
        for r in log
        if r["scope"] == "http" and r["method"] == "POST" and r["path"] == "/mcp"
        for method in r["rpc"]
    ]


def _ws_frames(log: list[dict[str, Any]], path: str = "/ws") -> list[dict[str, Any]]:
    return [
        r for r in log if r["scope"] == "websocket" and r["event"] == "frame" and r["path"] == path
    ]


async def test_the_log_sees_both_transports(logged_server):
    """The middleware itself: a raw POST /mcp and a WS step are both recorded."""
    url = logged_server.url
    await _clear(url)
    async with httpx.AsyncClient(timeout=5) as http:
        await http.post(f"{url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    client = MCPToolClient(base_url=url)
    client.use_production_mode = False  # tools as Gym steps over /ws
    async with client:
        await client.reset()
    log = await _log(url)
    assert _mcp_posts(log) == ["tools/list"]
    assert [f["type"] for f in _ws_frames(log)][:1] == ["reset"]


async def test_production_calls_tools_over_http_mcp(logged_server):
    url = logged_server.url
    async with MCPToolClient(base_url=url, mode="production") as client:
        await client.reset()
        await asyncio.sleep(0.05)
        await _clear(url)

        tools = await client.list_tools(use_cache=False)
        assert {t.name for t in tools} == {"echo_message", "echo_with_length"}
        assert await client.call_tool("echo_message", message="prod") == "prod"
        assert await client.call_tool("echo_with_length", message="ab") == {
            "message": "ab",
            "length": 2,
        }

        log = await _log(url)
        assert _mcp_posts(log) == ["tools/list", "tools/call", "tools/call"]
        assert not [f for f in _ws_frames(log) if f["type"] == "step"]
        assert not [r for r in log if r["scope"] == "websocket" and r["event"] == "connect"]

        # Tool calls did not go through the environment's step().
        await _clear(url)
        state = await client.state()
        assert state.step_count == 0
        assert [f["type"] for f in _ws_frames(await _log(url))] == ["state"]

        # The WebSocket and the HTTP tool calls share one server session.
        created = await client.mcp_request("openenv/session/create")
        assert created["result"]["session_id"] == client.session_id


async def test_simulation_calls_tools_as_ws_steps(logged_server):
    url = logged_server.url
    client = MCPToolClient(base_url=url)
    client.use_production_mode = False  # tools as Gym steps over /ws
    async with client:
        await client.reset()
        await _clear(url)

        tools = await client.list_tools(use_cache=False)
        assert {t.name for t in tools} == {"echo_message", "echo_with_length"}
        assert await client.call_tool("echo_message", message="sim") == "sim"
        assert await client.call_tool("echo_with_length", message="abc") == {
            "message": "abc",
            "length": 3,
        }

        log = await _log(url)
        frames = _ws_frames(log)
        assert [(f["type"], f.get("action")) for f in frames] == [
            ("step", "list_tools"),
            ("step", "call_tool"),
            ("step", "call_tool"),
        ]
        assert not [r for r in log if r["scope"] == "http" and r["path"] == "/mcp"]

        # Each tool call (and the listing) was one environment step.
        assert (await client.state()).step_count == 3


async def test_simulation_client_never_touches_http_mcp(logged_server):
    url = logged_server.url
    await _clear(url)
    client = MCPToolClient(base_url=url)
    client.use_production_mode = False  # tools as Gym steps over /ws
    async with client:
        await client.call_tool("echo_message", message="x")
    log = await _log(url)
    assert not [r for r in log if r["scope"] == "http" and r["path"] == "/mcp"]
    assert [(f["type"], f.get("action")) for f in _ws_frames(log)][:1] == [("step", "call_tool")]


async def test_client_mode_default_and_environment_variable(logged_server, monkeypatch):
    url = logged_server.url
    monkeypatch.delenv("OPENENV_CLIENT_MODE", raising=False)
    async with MCPToolClient(base_url=url) as client:  # MCP clients default to production
        assert client.mode == "production"
        await _clear(url)
        assert await client.call_tool("echo_message", message="default") == "default"
        log = await _log(url)
        assert _mcp_posts(log) == ["tools/call"]
        assert not _ws_frames(log)

    # As in OpenEnv, the variable names the mode of Gym clients; an MCP client stays in production.
    monkeypatch.setenv("OPENENV_CLIENT_MODE", "simulation")
    async with MCPToolClient(base_url=url) as client:
        assert client.mode == "production"
        await _clear(url)
        assert await client.call_tool("echo_message", message="env") == "env"
        assert _mcp_posts(await _log(url)) == ["tools/call"]

        # The seed FAQ's workaround sets the flag by hand; it switches the transport at once.
        client.use_production_mode = False
        await _clear(url)
        assert await client.call_tool("echo_message", message="ws") == "ws"
        log = await _log(url)
        assert not _mcp_posts(log)
        assert [(f["type"], f.get("action")) for f in _ws_frames(log)] == [("step", "call_tool")]
        client.use_production_mode = True
        await _clear(url)
        assert await client.call_tool("echo_message", message="back") == "back"
        assert _mcp_posts(await _log(url)) == ["tools/call"]


@pytest.mark.parametrize("mode", ["simulation", "Simulation", "bogus"])
def test_mcp_clients_refuse_any_mode_but_production(mode):
    with pytest.raises(ValueError, match="GenericEnvClient"):
        MCPToolClient(base_url="http://127.0.0.1:9", mode=mode)
    assert MCPToolClient(base_url="http://127.0.0.1:9", mode="PRODUCTION").use_production_mode


async def test_production_session_is_closed_with_the_client(logged_server):
    url = logged_server.url

    def active() -> int:
        return httpx.get(f"{url}/capacity", timeout=5).json()["active_sessions"]

    before = active()
    async with MCPToolClient(base_url=url, mode="production") as client:
        await client.call_tool("echo_message", message="x")
        assert active() == before + 1  # one session for both the WebSocket and /mcp
    for _ in range(100):
        if active() == before:
            break
        await asyncio.sleep(0.05)
    assert active() == before
