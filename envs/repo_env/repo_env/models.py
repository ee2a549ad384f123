"""Observation and state of the repository environment (actions are MCP tool calls)."""

from __future__ import annotations

from typing import Any, Optional

from pydantic import Field

from openenv.core.env_server.types import Observation, State


class RepoObservation(Observation):
    """What reset returns: the task, as an issue for the agent to resolve."""

    task_id: str = ""
    project: str = ""
    instruction: str = Field(default="", description="The failing tests and what to do.")
    files: list[str] = Field(default_factory=list, description="The repository's files.")
    tool_names: list[str] = Field(default_factory=list, description="The tools to call.")


class RepoState(State):
    task_id: str = ""
    project: str = ""
    max_steps: int = 0
    submitted: bool = False
    #: The grade once the episode is over (see `RepoEnvironment.grade`), else None.
    grade: Optional[dict[str, Any]] = None
    #: "bubblewrap" or "process": how isolated the tests run (see the README).
    sandbox_backend: str = ""
