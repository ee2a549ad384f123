"""Repository environment: fix an injected bug in a small real Python project (SWE-style)."""

from openenv.core.env_server.mcp_types import (
    CallToolAction,
    CallToolObservation,
    ListToolsAction,
    ListToolsObservation,
)

from .client import RepoEnv
from .models import RepoObservation, RepoState

__all__ = [
    "CallToolAction",
    "CallToolObservation",
    "ListToolsAction",
    "ListToolsObservation",
    "RepoEnv",
    "RepoObservation",
    "RepoState",
]
