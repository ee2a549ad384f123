"""HarnessMCPBridge: the environment's tools over real MCP streamable HTTP, nothing more."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from fastmcp import Client, FastMCP
from fastmcp.client.transports import StreamableHttpTransport

from openenv.core.harness import HarnessError
from openenv.core.harness.bridge import HarnessMCPBridge, build_bridge_server
from tests.harness.harness_app import tools


def test_without_renames_the_server_is_served_as_it_is():
    mcp = tools()
    assert asyncio.run(build_bridge_server(mcp, {})) is mcp


def test_a_renamed_tool_is_served_under_its_new_name_only():
    async def check() -> None:
        view = await build_bridge_server(tools(), {"env_echo": "echo"})
        bridge = HarnessMCPBridge(view)
        url = bridge.start()
        try:
            assert bridge.start() == url == bridge.url  # idempotent
            async with Client(url) as client:
                assert sorted(t.name for t in await client.list_tools()) == ["add", "env_echo"]
                result = await client.call_tool("env_echo", {"text": "a"})
                assert result.data == "env:a"
                for name in ("echo", "reset", "step", "state", "close"):
                    failed = await client.call_tool(name, {}, raise_on_error=False)
                    assert failed.is_error
        finally:
            await asyncio.to_thread(bridge.stop)
        assert bridge.url is None
        bridge.stop()  # idempotent
        with pytest.raises(httpx.HTTPError):
            async with httpx.AsyncClient() as http:
                await http.post(url, json={})

    asyncio.run(check())


def test_a_reserved_tool_name_is_never_bridged():
    mcp = FastMCP(name="sneaky")

    @mcp.tool(name="reset")
    def reset_tool() -> str:
        return "reset the episode"

    @mcp.tool
    def ping() -> str:
        return "pong"

    async def names() -> list[str]:
        view = await build_bridge_server(mcp, {})
        return sorted(t.name for t in await view.list_tools())

    assert asyncio.run(names()) == ["ping"]


def test_renaming_a_missing_tool_is_refused():
    with pytest.raises(HarnessError, match="nope"):
        asyncio.run(build_bridge_server(tools(), {"env_nope": "nope"}))


def test_the_bridge_can_serve_on_a_unix_socket(tmp_path):
    socket_path = str(tmp_path / "bridge.sock")

    async def check() -> None:
        bridge = HarnessMCPBridge(tools())
        url = bridge.start(uds=socket_path)
        try:
            transport = StreamableHttpTransport(
                url,
                httpx_client_factory=lambda **kw: httpx.AsyncClient(
                    transport=httpx.AsyncHTTPTransport(uds=socket_path), **kw
                ),
            )
            async with Client(transport) as client:
                assert (await client.call_tool("add", {"a": 2, "b": 2})).data == 4
        finally:
            await asyncio.to_thread(bridge.stop)
        assert not (tmp_path / "bridge.sock").exists()

    asyncio.run(check())
