"""Echo environment: the reference MCP tool environment."""

from openenv.core.env_server.mcp_types import (
    CallToolAction,
    CallToolObservation,
    ExecuteCodeAction,
    ExecuteCodeObservation,
    ListToolsAction,
    ListToolsObservation,
)
from openenv.core.env_server.types import State

from .client import EchoEnv

__all__ = [
    "CallToolAction",
    "CallToolObservation",
    "EchoEnv",
    "ExecuteCodeAction",
    "ExecuteCodeObservation",
    "ListToolsAction",
    "ListToolsObservation",
    "State",
]
