"""A tool environment whose tool keeps a count in fastmcp's session state (`ctx.get_state` /
`ctx.set_state`), written against OpenEnv's public API so that it runs unchanged with either
package: `<python> -m uvicorn tests.compat.counter_server:app` with our venv's python or the
compat venv's. `bump()` returns the session's count after adding one, as text ("1", "2", ...).
"""

from __future__ import annotations

from typing import Any, Optional
from uuid import uuid4

from fastmcp import Context, FastMCP

from openenv.core.env_server import (
    CallToolAction,
    CallToolObservation,
    MCPEnvironment,
    Observation,
    State,
    create_app,
)


def counter_tools() -> FastMCP:
    mcp = FastMCP("counter")

    @mcp.tool
    async def bump(ctx: Context) -> str:
        """Add one to this session's count and return it."""
        count = (await ctx.get_state("count") or 0) + 1
        await ctx.set_state("count", count)
        return str(count)

    return mcp


class CounterEnvironment(MCPEnvironment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__(counter_tools())
        self._state = State(episode_id=str(uuid4()), step_count=0)

    def reset(
        self, seed: Optional[int] = None, episode_id: Optional[str] = None, **kwargs: Any
    ) -> Observation:
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        return Observation(done=False, reward=0.0)

    def _step_impl(self, action: Any, timeout_s: Optional[float] = None, **kwargs: Any):
        return Observation(done=False, reward=0.0, metadata={"error": "tools only"})

    @property
    def state(self) -> State:
        return self._state


app = create_app(
    CounterEnvironment,
    CallToolAction,
    CallToolObservation,
    env_name="counter_env",
    max_concurrent_envs=8,
)
