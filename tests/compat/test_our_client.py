"""OUR CLIENT -> PUBLISHED SERVER.

Our `EchoEnv`, `GenericEnvClient` and `MCPToolClient` drive the echo server written against the
published package (published_echo_server.py, run by the compat venv). That server speaks plain
OpenEnv: no subprotocol, no request ids, no session resume, so our clients must fall back to the
lockstep protocol and still map its error frames and JSON-RPC errors to our typed exceptions.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from echo_env import CallToolAction, CallToolObservation, EchoEnv, ListToolsAction, State
from openenv.core import GenericEnvClient, MCPToolClient
from openenv.core.env_server.mcp_types import ListToolsObservation, ToolErrorType
from openenv.core.errors import (
    CapacityReachedError,
    InvalidRequestError,
    ToolCallError,
    is_infrastructure_error,
)
from tests.support.server import RunningServer

from .conftest import PUBLISHED_MAX_SESSIONS

pytestmark = pytest.mark.compat

READY = {"status": "ready", "message": "Echo environment ready!"}
TOOLS = ["echo_message", "echo_with_length"]
BAD_ACTION = {"message": "not a CallToolAction"}


def call_echo(message: str) -> dict[str, Any]:
    return {"type": "call_tool", "tool_name": "echo_message", "arguments": {"message": message}}


@pytest.fixture
def url(published_server: RunningServer) -> str:
    return published_server.url


# -- EchoEnv / MCPToolClient, production mode (the default) ---------------------------------


async def test_echo_env_detects_plain_server(url: str) -> None:
    async with EchoEnv(base_url=url) as env:
        assert env.mode == "production"
        assert env.supports_resume is False  # the server did not accept the openenv.v1 subprotocol
        assert env.session_id is None  # no session frame from an OpenEnv server
        result = await env.reset()
        assert result.metadata == READY


async def test_echo_env_episode_over_ws(url: str) -> None:
    async with EchoEnv(base_url=url) as env:
        reset = await env.reset(episode_id="ep-ours")
        assert reset.reward == 0.0
        assert reset.done is False
        assert reset.metadata == READY
        assert reset.observation.metadata == READY

        step = await env.step(CallToolAction(tool_name="echo_message", arguments={"message": "hi"}))
        obs = step.observation
        assert isinstance(obs, CallToolObservation)
        assert obs.tool_name == "echo_message"
        # As OpenEnv's client: the MCP result as a dict; its keys also read as attributes.
        assert obs.result["data"] == "hi" and obs.result.data == "hi"
        assert obs.result["is_error"] is False and obs.result["content"][0]["text"] == "hi"
        assert obs.error is None
        assert step.reward is None
        assert step.done is False

        step = await env.step(
            CallToolAction(tool_name="echo_with_length", arguments={"message": "hello"})
        )
        assert step.observation.result["data"] == {"message": "hello", "length": 5}

        listed = await env.step(ListToolsAction())
        assert isinstance(listed.observation, ListToolsObservation)
        assert sorted(t.name for t in listed.observation.tools) == TOOLS

        state = await env.state()
        assert isinstance(state, State)
        assert state.episode_id == "ep-ours"
        assert state.step_count == 3


async def test_echo_env_unknown_tool_step_is_an_observation(url: str) -> None:
    async with EchoEnv(base_url=url) as env:
        await env.reset()
        step = await env.step(CallToolAction(tool_name="nope", arguments={}))
        assert step.observation.result is None
        assert step.observation.error is not None
        assert step.observation.error.error_type is ToolErrorType.TOOL_NOT_FOUND
        assert "nope" in step.observation.error.message


async def test_echo_env_list_tools_and_call_tool_over_http_mcp(url: str) -> None:
    async with EchoEnv(base_url=url) as env:
        assert env.use_production_mode is True
        await env.reset(episode_id="ep-mcp")
        tools = await env.list_tools()
        assert sorted(t.name for t in tools) == TOOLS
        echo = next(t for t in tools if t.name == "echo_message")
        assert echo.description == "Echo back the provided message."
        # The published server sends MCP's camel-case `inputSchema`.
        assert echo.input_schema["properties"]["message"]["type"] == "string"
        assert await env.has_tool("echo_with_length")
        assert await env.get_tool("nope") is None

        assert await env.call_tool("echo_message", message="Hello!") == "Hello!"
        assert await env.call_tool("echo_with_length", message="Hello!") == {
            "message": "Hello!",
            "length": 6,
        }
        # /mcp tool calls run in this session's env but are not env steps (OpenEnv semantics).
        state = await env.state()
        assert state.episode_id == "ep-mcp"
        assert state.step_count == 0


async def test_echo_env_call_tool_errors_are_typed(url: str) -> None:
    async with EchoEnv(base_url=url) as env:
        with pytest.raises(ToolCallError) as info:
            await env.call_tool("nope")
        assert isinstance(info.value, RuntimeError)  # code written for OpenEnv still works
        assert str(info.value) == "Tool 'nope' failed: Unknown tool: 'nope'"
        assert info.value.tool_name == "nope"
        assert not is_infrastructure_error(info.value)

        with pytest.raises(ToolCallError) as info:
            await env.call_tool("echo_message", wrong="x")
        assert info.value.tool_name == "echo_message"
        # The session survives failed tool calls.
        assert await env.call_tool("echo_message", message="still here") == "still here"


async def test_invalid_action_raises_invalid_request_error(url: str) -> None:
    async with EchoEnv(base_url=url) as env:
        await env.reset(episode_id="ep-bad")
        with pytest.raises(InvalidRequestError) as info:
            await env.step(BAD_ACTION)
        err = info.value
        assert err.code == "VALIDATION_ERROR"
        assert err.category == "client"
        assert not is_infrastructure_error(err)
        assert str(err) == "Server error: Invalid message (code: VALIDATION_ERROR)"
        assert {tuple(e["loc"]) for e in err.data["errors"]} >= {("tool_name",), ("message",)}
        # The connection stays usable after an error frame; the failed step did not count.
        step = await env.step(CallToolAction(tool_name="echo_message", arguments={"message": "ok"}))
        assert step.observation.result["data"] == "ok"
        assert (await env.state()).step_count == 1


async def test_mcp_tool_client_from_core(url: str) -> None:
    async with MCPToolClient(base_url=url) as env:
        assert env.supports_resume is False
        reset = await env.reset()
        assert reset.metadata == READY
        assert sorted(t.name for t in await env.list_tools()) == TOOLS
        assert await env.call_tool("echo_message", message="core") == "core"
        step = await env.step(CallToolAction(tool_name="echo_message", arguments={"message": "s"}))
        assert step.observation.result["data"] == "s"
        assert (await env.state()).step_count == 1


async def test_mcp_tool_client_simulation_mode_uses_steps(url: str) -> None:
    """Tools as Gym steps over /ws (`use_production_mode = False`) work on OpenEnv's server."""
    env = MCPToolClient(base_url=url)
    env.use_production_mode = False  # tools as Gym steps over /ws
    async with env:
        assert env.use_production_mode is False
        await env.reset()
        assert sorted(t.name for t in await env.list_tools()) == TOOLS
        assert await env.call_tool("echo_message", message="sim") == "sim"
        with pytest.raises(ToolCallError) as info:
            await env.call_tool("nope")
        assert info.value.error_type == "tool_not_found"
        assert (await env.state()).step_count == 3


# -- GenericEnvClient ------------------------------------------------------------------------


async def test_generic_client_episode(url: str) -> None:
    async with GenericEnvClient(base_url=url) as env:
        assert env.supports_resume is False
        reset = await env.reset(episode_id="ep-generic")
        assert reset.metadata == READY
        assert reset.reward == 0.0
        step = await env.step(call_echo("generic"))
        assert step.observation["tool_name"] == "echo_message"
        assert step.observation["result"]["data"] == "generic"
        assert step.observation["error"] is None
        step = await env.step(
            CallToolAction(tool_name="echo_with_length", arguments={"message": "abc"})
        )
        assert step.observation["result"]["data"] == {"message": "abc", "length": 3}
        assert await env.state() == {"episode_id": "ep-generic", "step_count": 2}

        with pytest.raises(InvalidRequestError) as info:
            await env.step(BAD_ACTION)
        assert info.value.code == "VALIDATION_ERROR"
        assert await env.state() == {"episode_id": "ep-generic", "step_count": 2}


async def test_generic_client_tunnelled_mcp(url: str) -> None:
    """`{"type":"mcp"}` frames carry JSON-RPC over the session's WebSocket."""
    async with GenericEnvClient(base_url=url) as env:
        await env.reset()
        reply = await env.mcp_request(
            "tools/call", {"name": "echo_message", "arguments": {"message": "tunnel"}}
        )
        assert reply["result"]["data"] == "tunnel"
        listed = await env.mcp_request("tools/list")
        assert sorted(t["name"] for t in listed["result"]["tools"]) == TOOLS


async def test_generic_client_concurrent_requests_stay_matched(url: str) -> None:
    """Without request ids, concurrent calls on one client must be serialised, not mixed up."""
    async with GenericEnvClient(base_url=url) as env:
        await env.reset()
        messages = [f"m{i}" for i in range(8)]
        steps = await asyncio.gather(*(env.step(call_echo(m)) for m in messages))
        assert [s.observation["result"]["data"] for s in steps] == messages
        assert (await env.state())["step_count"] == len(messages)


@pytest.mark.parametrize("form", ["bare", "trailing_slash", "ws"])
async def test_generic_client_base_url_forms(published_server: RunningServer, form: str) -> None:
    base = {
        "bare": f"127.0.0.1:{published_server.port}",
        "trailing_slash": published_server.url + "/",
        "ws": published_server.url.replace("http://", "ws://"),
    }[form]
    async with GenericEnvClient(base_url=base) as env:
        assert (await env.reset()).metadata == READY


# -- sync wrapper ------------------------------------------------------------------------------


def test_echo_env_sync_wrapper(url: str) -> None:
    with EchoEnv(base_url=url).sync() as env:
        assert env.supports_resume is False
        assert env.reset(episode_id="ep-sync").metadata == READY
        step = env.step(CallToolAction(tool_name="echo_message", arguments={"message": "sync"}))
        assert step.observation.result["data"] == "sync"
        assert sorted(t.name for t in env.list_tools()) == TOOLS
        assert env.call_tool("echo_with_length", message="ab") == {"message": "ab", "length": 2}
        with pytest.raises(InvalidRequestError):
            env.step(BAD_ACTION)
        state = env.state()
        assert (state.episode_id, state.step_count) == ("ep-sync", 1)


def test_generic_client_sync_wrapper(url: str) -> None:
    with GenericEnvClient(base_url=url).sync() as env:
        env.reset(episode_id="ep-gsync")
        assert env.step(call_echo("gsync")).observation["result"]["data"] == "gsync"
        assert env.state() == {"episode_id": "ep-gsync", "step_count": 1}


# -- sessions and capacity -------------------------------------------------------------------


async def test_sessions_are_released_on_close(url: str) -> None:
    """More episodes than the server has slots: each close (WS close + openenv/session/close)
    must free its slot."""
    for i in range(PUBLISHED_MAX_SESSIONS + 2):
        async with EchoEnv(base_url=url) as env:
            await env.reset()
            assert await env.call_tool("echo_message", message=str(i)) == str(i)
        async with GenericEnvClient(base_url=url) as generic:
            await generic.reset()


async def test_capacity_refusal_is_typed(url: str) -> None:
    """The published server refuses a session beyond its limit with a CAPACITY_REACHED error
    frame and closes the socket; our client must raise CapacityReachedError (retryable), even
    when the refusal arrived before the first request was sent."""
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(PUBLISHED_MAX_SESSIONS):
            env = await stack.enter_async_context(GenericEnvClient(base_url=url))
            await env.reset()
        extra = await stack.enter_async_context(GenericEnvClient(base_url=url))
        await asyncio.sleep(0.5)  # the refusal frame and the close are already queued
        with pytest.raises(CapacityReachedError) as info:
            await extra.reset()
        assert info.value.code == "CAPACITY_REACHED"
        assert info.value.retryable is True
        assert info.value.data["max_sessions"] == PUBLISHED_MAX_SESSIONS
    # Every slot is free again.
    async with GenericEnvClient(base_url=url) as env:
        assert (await env.reset()).metadata == READY


async def test_capacity_refusal_on_immediate_request(url: str) -> None:
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(PUBLISHED_MAX_SESSIONS):
            env = await stack.enter_async_context(GenericEnvClient(base_url=url))
            await env.reset()
        extra = GenericEnvClient(base_url=url)
        stack.push_async_callback(extra.close)
        with pytest.raises(CapacityReachedError):
            await extra.reset()  # connects and sends at once
