"""An MCP environment with mode-specific tools; the server mode comes from OPENENV_MODE.

- `ping`: every mode;
- `sim_search` (simulation only) and `live_search` (production only);
- `fetch`: one name with a simulation and a production variant that answer differently.
"""

from __future__ import annotations

from typing import Any
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


def sim_search(query: str) -> str:
    """Search the simulated corpus."""
    return f"simulated:{query}"


def live_search(query: str) -> str:
    """Search the live corpus."""
    return f"live:{query}"


def fetch_simulated(item: str) -> str:
    """Fetch an item (simulation)."""
    return f"{item}@simulation"


def fetch_live(item: str) -> str:
    """Fetch an item (production)."""
    return f"{item}@production"


class ModesEnvironment(MCPEnvironment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        mcp = FastMCP("modes_env")

        @mcp.tool
        async def ping() -> str:
            """Answer pong."""
            return "pong"

        super().__init__(mcp)
        self.tool(sim_search, mode="simulation")
        self.tool(live_search, mode="production")
        self.tool(fetch_simulated, mode="simulation", name="fetch")
        self.tool(fetch_live, mode="production", name="fetch")
        self._state = State(episode_id=str(uuid4()))

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> Observation:
        self._state = State(episode_id=episode_id or str(uuid4()))
        return Observation(metadata={"mode": self.mode})

    async def step_async(
        self, action: Any, timeout_s: float | None = None, **kwargs: Any
    ) -> Observation:
        self._state.step_count += 1
        return await super().step_async(action, timeout_s=timeout_s, **kwargs)

    @property
    def state(self) -> State:
        return self._state


app = create_app(ModesEnvironment, CallToolAction, CallToolObservation, env_name="modes_env")
