"""The stock `mcp` SDK client (Streamable HTTP + ClientSession) against `/mcp`."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from mcp import ClientSession


def _active(url: str) -> int:
    return httpx.get(f"{url}/capacity", timeout=5).json()["active_sessions"]


async def _wait_active(url: str, expected: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while _active(url) != expected:
        if time.monotonic() > deadline:
            raise AssertionError(f"active_sessions stayed {_active(url)}, expected {expected}")
        await asyncio.sleep(0.05)


async def test_initialize_list_and_call(echo_server):
    url = echo_server.url
    async with streamable_http_client(f"{url}/mcp") as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            assert init.protocol_version
            assert init.server_info.name == "echo_env"
            assert init.capabilities.tools is not None

            listed = await session.list_tools()
            tools = {t.name: t for t in listed.tools}
            assert set(tools) == {"echo_message", "echo_with_length"}
            assert tools["echo_message"].input_schema["properties"]["message"]["type"] == "string"
            assert tools["echo_message"].input_schema["required"] == ["message"]
            assert tools["echo_message"].description == "Echo back the provided message."

            result = await session.call_tool("echo_message", {"message": "Hello, World!"})
            assert result.is_error is False
            assert result.content[0].type == "text"
            assert result.content[0].text == "Hello, World!"

            result = await session.call_tool("echo_with_length", {"message": "Hello"})
            assert result.is_error is False
            assert result.structured_content == {"message": "Hello", "length": 5}


async def test_unknown_tool_is_an_error(echo_server):
    async with streamable_http_client(f"{echo_server.url}/mcp") as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            try:
                result = await session.call_tool("no_such_tool", {"message": "x"})
            except MCPError as exc:
                assert exc.error.code == -32602
                assert "no_such_tool" in exc.error.message
            else:  # the specification also allows an isError result
                assert result.is_error is True
                assert "no_such_tool" in result.content[0].text
            # The session is still usable.
            ok = await session.call_tool("echo_message", {"message": "still here"})
            assert ok.content[0].text == "still here"


async def test_invalid_arguments_are_an_error_result(echo_server):
    async with streamable_http_client(f"{echo_server.url}/mcp") as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            for bad in ({"message": 5}, {}, {"message": "x", "extra": 1}):
                result = await session.call_tool("echo_message", bad)
                assert result.is_error is True, bad
                assert result.content and result.content[0].type == "text"
                assert "echo_message" in result.content[0].text


async def test_session_is_freed_on_close(echo_server):
    url = echo_server.url
    before = _active(url)
    async with streamable_http_client(f"{url}/mcp") as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            await session.call_tool("echo_message", {"message": "x"})
            assert _active(url) == before + 1
    await _wait_active(url, before)


async def test_two_stock_sessions_are_independent_and_both_freed(echo_server):
    url = echo_server.url
    before = _active(url)
    async with streamable_http_client(f"{url}/mcp") as (r1, w1):
        async with ClientSession(r1, w1) as s1:
            await s1.initialize()
            async with streamable_http_client(f"{url}/mcp") as (r2, w2):
                async with ClientSession(r2, w2) as s2:
                    await s2.initialize()
                    assert _active(url) == before + 2
                    a, b = await asyncio.gather(
                        s1.call_tool("echo_message", {"message": "one"}),
                        s2.call_tool("echo_message", {"message": "two"}),
                    )
                    assert (a.content[0].text, b.content[0].text) == ("one", "two")
            await _wait_active(url, before + 1)
    await _wait_active(url, before)


@pytest.mark.parametrize("version", ["2025-06-18", "2025-03-26"])
async def test_raw_initialize_negotiates_a_supported_version(echo_server, version):
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        },
    }
    headers = {"Accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient(timeout=5) as http:
        reply = await http.post(f"{echo_server.url}/mcp", json=body, headers=headers)
        assert reply.status_code == 200
        assert reply.json()["result"]["protocolVersion"] == version
        sid = reply.headers["mcp-session-id"]
        gone = await http.delete(f"{echo_server.url}/mcp", headers={"mcp-session-id": sid})
        assert gone.status_code == 200
        # A closed Streamable HTTP session is 404 (the client must initialize again).
        again = await http.post(
            f"{echo_server.url}/mcp",
            json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            headers={**headers, "mcp-session-id": sid},
        )
        assert again.status_code == 404
