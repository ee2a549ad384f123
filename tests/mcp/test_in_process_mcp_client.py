"""OpenEnv's `MCPEnvironment.mcp_client` / `mcp_session()`: environments that call their own
tools through fastmcp's in-process client, as OpenEnv's environments may, run unchanged."""

from __future__ import annotations

import asyncio

import pytest
from fastmcp import Client, FastMCP

from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.types import Observation, State


class Notes(MCPEnvironment):
    def __init__(self) -> None:
        mcp = FastMCP("notes")
        self.notes: list[str] = []

        @mcp.tool
        def add(text: str) -> int:
            self.notes.append(text)
            return len(self.notes)

        super().__init__(mcp)
        self._state = State(episode_id="e", step_count=0)

    def reset(self, seed=None, episode_id=None, **kwargs) -> Observation:  # type: ignore[override]
        self.notes.clear()
        return Observation(done=False, reward=0.0)

    def _step_impl(self, action, timeout_s=None, **kwargs) -> Observation:  # type: ignore[override]
        return Observation(done=False, reward=0.0)

    @property
    def state(self) -> State:
        return self._state

    async def add_through_client(self, text: str) -> object:
        async with self.mcp_session() as client:
            result = await client.call_tool("add", {"text": text})
        return result.data


def test_mcp_client_is_a_fastmcp_client_on_the_environment_tools() -> None:
    env = Notes()
    assert isinstance(env.mcp_client, Client)
    assert env.mcp_client is env.mcp_client  # made once

    async def listed() -> list[str]:
        async with env.mcp_client as client:
            return [tool.name for tool in await client.list_tools()]

    assert asyncio.run(listed()) == ["add"]


def test_mcp_session_calls_the_tools_of_this_environment() -> None:
    env = Notes()
    assert asyncio.run(env.add_through_client("a")) == 1
    assert asyncio.run(env.add_through_client("b")) == 2
    assert env.notes == ["a", "b"]


def test_closed_environment_has_no_client() -> None:
    env = Notes()
    env.close()
    assert env.mcp_client is None
    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(env.add_through_client("late"))
