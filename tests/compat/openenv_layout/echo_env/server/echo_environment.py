"""An MCP environment with two tools; reset answers a ready message in its metadata."""

from typing import Any, Optional
from uuid import uuid4

from fastmcp import FastMCP

from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.types import Observation, State

READY = "Echo environment ready!"


def _tools() -> FastMCP:
    mcp = FastMCP("echo_env")

    @mcp.tool
    def echo_message(message: str) -> str:
        """Send the message back unchanged."""
        return message

    @mcp.tool
    def echo_with_length(message: str) -> dict:
        """Send the message back with its length."""
        return {"message": message, "length": len(message)}

    return mcp


class EchoEnvironment(MCPEnvironment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__(_tools())
        self._state = State(episode_id=str(uuid4()), step_count=0)

    def reset(
        self, seed: Optional[int] = None, episode_id: Optional[str] = None, **kwargs: Any
    ) -> Observation:
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        return Observation(done=False, reward=0.0, metadata={"status": "ready", "message": READY})

    def _step_impl(self, action: Any, timeout_s: Optional[float] = None, **kwargs: Any):
        return Observation(
            done=False,
            reward=0.0,
            metadata={"error": f"unknown action type {type(action).__name__}"},
        )

    @property
    def state(self) -> State:
        return self._state
