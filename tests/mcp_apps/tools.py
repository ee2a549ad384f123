"""An MCP environment whose tools fail in known ways, for tool-error typing tests.

- `lookup(key)` raises `ValueError("not found in database")`: an execution error whose message
  merely contains "not found";
- `validate(text)` raises `ValueError("invalid argument: ...")`: an execution error whose message
  merely mentions an invalid argument;
- `parse_record(raw)` validates data with pydantic inside its body and fails: the tool's own code
  failed, not the caller's arguments;
- `add(a: int, b: int)`: typed arguments (a wrong type is `invalid_args`);
- `slow(seconds)`: has a 0.3 s tool timeout (fastmcp's `timeout=`);
- `sleep(seconds)`: no timeout of its own (for the per-step `timeout_s` of HTTP `/step`);
- `incr()`: counts calls on this environment instance (which session served a call);
- mode tools `sim_lookup` / `sim_add` (simulation only) fail like `lookup` / `add`.
"""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import uuid4

import pydantic
from fastmcp import FastMCP

from openenv.core.env_server import (
    CallToolAction,
    CallToolObservation,
    MCPEnvironment,
    Observation,
    State,
    create_app,
)


class _Record(pydantic.BaseModel):
    id: int


class ToolsEnvironment(MCPEnvironment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        mcp = FastMCP("tools_env")
        self.calls = 0

        @mcp.tool
        async def lookup(key: str) -> str:
            """Look a key up."""
            raise ValueError("not found in database")

        @mcp.tool
        async def validate(text: str) -> str:
            """Validate some text."""
            raise ValueError(f"invalid argument: {text!r} is unusable")

        @mcp.tool
        async def parse_record(raw: str) -> int:
            """Parse a record (its body validates data and fails)."""
            return _Record.model_validate({"id": raw}).id

        @mcp.tool
        async def add(a: int, b: int) -> int:
            """Add two integers."""
            return a + b

        @mcp.tool(timeout=0.3)
        async def slow(seconds: float) -> str:
            """Sleep, with a 0.3 s tool timeout."""
            await asyncio.sleep(seconds)
            return "finished"

        @mcp.tool
        async def sleep(seconds: float) -> str:
            """Sleep (no timeout of its own)."""
            await asyncio.sleep(seconds)
            return "slept"

        @mcp.tool
        async def incr() -> int:
            """Count calls on this environment instance."""
            self.calls += 1
            return self.calls

        super().__init__(mcp)

        def sim_lookup(key: str) -> str:
            """Simulation-only lookup that fails in its body."""
            raise ValueError("not found in database")

        def sim_add(a: int, b: int) -> int:
            """Simulation-only typed tool."""
            return a + b

        def sim_parse(raw: str) -> int:
            """Simulation-only tool whose body fails pydantic validation."""
            return _Record.model_validate({"id": raw}).id

        self.tool(sim_lookup, mode="simulation")
        self.tool(sim_add, mode="simulation")
        self.tool(sim_parse, mode="simulation")
        self._state = State(episode_id=str(uuid4()))

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> Observation:
        self._state = State(episode_id=episode_id or str(uuid4()))
        return Observation(metadata={"status": "ready"})

    async def step_async(
        self, action: Any, timeout_s: float | None = None, **kwargs: Any
    ) -> Observation:
        self._state.step_count += 1
        return await super().step_async(action, timeout_s=timeout_s, **kwargs)

    @property
    def state(self) -> State:
        return self._state


app = create_app(ToolsEnvironment, CallToolAction, CallToolObservation, env_name="tools_env")
