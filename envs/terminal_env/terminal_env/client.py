"""Typed client of the terminal environment."""

from __future__ import annotations

from typing import Any

from openenv.core import EnvClient
from openenv.core.mcp_client import MCPToolClient

from .models import TerminalAction, TerminalObservation, TerminalState


class TerminalEnv(EnvClient[TerminalAction, TerminalObservation, TerminalState]):
    """`reset(task_id="count-lines")`, `step(TerminalAction(command="wc -l data.txt"))`, then
    `step(TerminalAction(submit=True))`: the reward and `metadata["verification"]` arrive."""


class TerminalToolEnv(MCPToolClient):
    """Client of the MCP flavour (`terminal_env.server.mcp_app`): `bash` and `submit` tool
    calls as steps, `step(CallToolAction(tool_name="bash", arguments={"command": "ls"}))`;
    the `submit` step's result has the reward and `done`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.use_production_mode = False  # a tool call is an episode step, over /ws
