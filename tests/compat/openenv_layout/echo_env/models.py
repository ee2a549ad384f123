"""The echo environment speaks MCP: its actions and observations are OpenEnv's MCP types."""

from openenv.core.env_server.mcp_types import (
    CallToolAction,
    CallToolObservation,
    ListToolsAction,
    ListToolsObservation,
)

__all__ = ["CallToolAction", "CallToolObservation", "ListToolsAction", "ListToolsObservation"]
