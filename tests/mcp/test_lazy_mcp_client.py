"""The in-process fastmcp client of a served MCP session is made only when something uses it.

OpenEnv's server connects every MCP session's client as the session starts; tool calls here do
not go through it, so by default it is made and connected at its first use and then held until
the session ends (`MCPEnvironment.session_context`). `connect_mcp_client_at_start` keeps
OpenEnv's behaviour. Real servers, real WebSocket frames (tests/mcp_apps/held_client.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fastmcp import Client
from websockets.asyncio.client import connect

from openenv.core.env_server.interfaces import session_context_of
from tests.mcp_apps._instances import ENVS
from tests.mcp_apps.held_client import HeldClientEnvironment
from tests.support.server import serve


async def _frames(url: str, frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    replies = []
    async with connect(url.replace("http", "ws", 1) + "/ws") as ws:
        for frame in frames:
            await ws.send(json.dumps(frame))
            replies.append(json.loads(await ws.recv()))
    return replies


def _metadata(reply: dict[str, Any]) -> dict[str, Any]:
    assert reply["type"] == "observation", reply
    return reply["data"]["observation"]["metadata"]


def _ended(env: Any) -> bool:
    """The session's end let the client go and closed the environment (the server does both
    after the socket closes, so the test waits for them)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if not env.used_client.is_connected() and env.mcp_client is None:
            return True
        time.sleep(0.02)
    return False


RESET = {"type": "reset", "data": {}}
PROBE = {"type": "step", "data": {"op": "probe"}}
USE = {"type": "step", "data": {"op": "use"}}


@pytest.mark.parametrize("app", ["app", "eager_app"])
def test_the_client_is_made_at_first_use_and_held_until_the_session_ends(app: str) -> None:
    eager = app == "eager_app"
    ENVS.clear()
    with serve(f"tests.mcp_apps.held_client:{app}", in_process=True) as server:
        replies = asyncio.run(_frames(server.url, [RESET, PROBE, USE, PROBE, USE]))
        reset, probe, first, held, second = (_metadata(r) for r in replies)
        # Lazy: nothing made by the session's start, a reset or a step that does not use it.
        assert reset == probe == {"made": eager, "connected": eager}
        assert first == {"count": 1, "made": True, "connected": True}
        # Still connected after `async with env.mcp_session()` left: the session holds it.
        assert held == {"made": True, "connected": True}
        assert second["connected"] is True
        (env,) = ENVS
        assert _ended(env)


def test_tool_steps_and_listings_make_no_client() -> None:
    env = HeldClientEnvironment()

    async def session() -> None:
        context = session_context_of(env)
        assert context is not None
        async with context:
            assert (await env.call_tool("bump")).error is None
            assert [tool.name for tool in await env.list_tools()] == ["bump"]
            await env.tool_functions()

    asyncio.run(session())
    assert "_mcp_client" not in env.__dict__


def test_direct_async_with_on_the_client_joins_the_hold() -> None:
    env = HeldClientEnvironment()

    async def session() -> bool:
        context = session_context_of(env)
        assert context is not None
        async with context:
            async with env.mcp_client as client:
                assert isinstance(client, Client)
                await client.list_tools()
            connected = client.is_connected()
        return connected and not client.is_connected()

    assert asyncio.run(session())


def test_a_use_from_another_loop_connects_only_for_itself() -> None:
    """A sync step runs its coroutines on a loop of its own: holding a connection made there
    would leave it on a loop that is gone."""
    env = HeldClientEnvironment()

    async def use_in_own_loop() -> bool:
        async with env.mcp_session() as client:
            await client.call_tool("bump", {})
        return client.is_connected()

    async def session() -> bool:
        context = session_context_of(env)
        assert context is not None
        async with context:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(None, asyncio.run, use_in_own_loop())

    assert asyncio.run(session()) is False


class _OwnSession(HeldClientEnvironment):
    entered = 0

    @contextlib.asynccontextmanager
    async def mcp_session(self) -> AsyncIterator[Any]:
        type(self).entered += 1
        yield None


def test_an_overridden_mcp_session_is_held_from_the_start_as_before() -> None:
    env = _OwnSession()

    async def session() -> None:
        context = session_context_of(env)
        assert context is not None
        async with context:
            pass

    asyncio.run(session())
    assert _OwnSession.entered == 1


def test_a_client_set_by_the_environment_is_connected_from_the_start() -> None:
    env = HeldClientEnvironment()
    env.mcp_client = Client(env.mcp_server)

    async def session() -> bool:
        context = session_context_of(env)
        assert context is not None
        async with context:
            return bool(env.mcp_client.is_connected())

    assert asyncio.run(session())
