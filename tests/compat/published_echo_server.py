"""An echo environment written against the *published* OpenEnv package (openenv==0.10.0).

It imports only the published package and fastmcp, and runs in the compat virtual environment:
`<compat-python> -m uvicorn tests.compat.published_echo_server:app`. It mirrors our echo env (same
tools, same reset observation) so that both servers can be driven by the same clients.
`OPENENV_COMPAT_MAX_ENVS` sets the number of concurrent sessions (default 8).
"""

from __future__ import annotations

import os
from typing import Any, Optional
from uuid import uuid4

from fastmcp import FastMCP

from openenv.core.env_server import (
    CallToolAction,
    CallToolObservation,
    MCPEnvironment,
    Observation,
    State,
    create_app,
)

READY_MESSAGE = "Echo environment ready!"


class EchoEnvironment(MCPEnvironment):
    SUPPORTS_CONCURRENT_SESSIONS = True  # required for max_concurrent_envs > 1

    def __init__(self) -> None:
        mcp = FastMCP("echo_env")

        @mcp.tool
        def echo_message(message: str) -> str:
            """Echo back the provided message."""
            return message

        @mcp.tool
        def echo_with_length(message: str) -> dict:
            """Echo back the message together with its length."""
            return {"message": message, "length": len(message)}

        super().__init__(mcp)
        self._state = State(episode_id=str(uuid4()), step_count=0)

    def reset(
        self, seed: Optional[int] = None, episode_id: Optional[str] = None, **kwargs: Any
    ) -> Observation:
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        return Observation(
            done=False, reward=0.0, metadata={"status": "ready", "message": READY_MESSAGE}
        )

    def _step_impl(self, action: Any, timeout_s: Optional[float] = None, **kwargs: Any):
        return Observation(
            done=False,
            reward=0.0,
            metadata={"error": f"Unknown action type: {type(action).__name__}"},
        )

    # The published MCPEnvironment does not count steps: count them on both paths.
    def step(self, action: Any, timeout_s: Optional[float] = None, **kwargs: Any):
        self._state.step_count += 1
        return super().step(action, timeout_s=timeout_s, **kwargs)

    async def step_async(self, action: Any, timeout_s: Optional[float] = None, **kwargs: Any):
        self._state.step_count += 1
        return await super().step_async(action, timeout_s=timeout_s, **kwargs)

    @property
    def state(self) -> State:
        return self._state


app = create_app(
    EchoEnvironment,
    CallToolAction,
    CallToolObservation,
    env_name="echo_env",
    max_concurrent_envs=int(os.environ.get("OPENENV_COMPAT_MAX_ENVS", "8")),
)
