"""Typed client for the repository environment."""

from __future__ import annotations

from openenv.core.mcp_client import MCPToolClient

from .models import RepoObservation, RepoState


class RepoEnv(MCPToolClient):
    """`reset(task_id=...)` gives a `RepoObservation`; `call_tool("read_file", path=...)` and the
    other tools return their values; `call_tool("submit")` ends the episode with its grade."""

    observation_type = RepoObservation
    state_type = RepoState
