"""Typed client for the echo environment."""

from __future__ import annotations

from openenv.core.mcp_client import MCPToolClient


class EchoEnv(MCPToolClient):
    """Client for the echo environment.

    `step(CallToolAction(...))` works in any mode; `call_tool("echo_message", message=...)` uses
    HTTP `/mcp` by default and a Gym step over `/ws` after `use_production_mode = False`.
    """
