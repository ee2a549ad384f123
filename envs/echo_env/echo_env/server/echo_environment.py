"""The echo environment: two tools that return what they are given."""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from fastmcp import FastMCP

from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.types import Action, Observation, State

READY_MESSAGE = "Echo environment ready!"


class EchoObservation(Observation):
    """The reset observation: `echoed_message` greets the agent."""

    echoed_message: str = ""


def _build_tools() -> FastMCP:
    mcp = FastMCP("echo_env")

    @mcp.tool
    async def echo_message(message: str) -> str:
        """Echo back the provided message."""
        return message

    @mcp.tool
    async def echo_with_length(message: str) -> dict:
        """Echo back the message together with its length."""
        return {"message": message, "length": len(message)}

    return mcp


class EchoEnvironment(MCPEnvironment):
    """Each tool call is one step; the state counts steps across the episode."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__(_build_tools())
        self._state = State(episode_id=str(uuid4()), step_count=0)

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> EchoObservation:
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        return EchoObservation(
            echoed_message=READY_MESSAGE,
            done=False,
            reward=0.0,
            metadata={"status": "ready", "message": READY_MESSAGE},
        )

    async def reset_async(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> EchoObservation:
        return self.reset(seed=seed, episode_id=episode_id)

    async def step_async(
        self, action: Action, timeout_s: float | None = None, **kwargs: Any
    ) -> Observation:
        self._state.step_count += 1
        return await super().step_async(action, timeout_s=timeout_s, **kwargs)

    @property
    def state(self) -> State:
        return self._state
