"""The terminal environment as MCP tools: `bash(command, timeout_s)` and `submit()`.

The same tasks, sandbox and verifiers as `TerminalEnvironment` (which it wraps); for agents
that speak tool calls. A tool call is one step: `bash` answers with the command's output, exit
code, status and directory; `submit` (or running out of steps) ends the episode, and that
step's observation carries the verifier's reward and `done`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from fastmcp import FastMCP

from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import CallToolAction
from openenv.core.env_server.types import Action, Observation
from openenv.core.errors import InvalidActionError

from ..models import TerminalAction, TerminalObservation, TerminalState
from .terminal_environment import TerminalEnvironment


class TerminalToolEnvironment(MCPEnvironment):
    """`reset(task_id=...)` as in `TerminalEnvironment`, then `bash` and `submit` tool calls."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(
        self, tasks_dirs: Sequence[str | Path] = (), backend: Optional[str] = None
    ) -> None:
        self.shell = TerminalEnvironment(tasks_dirs=tasks_dirs, backend=backend)
        self._last: Optional[TerminalObservation] = None
        tools = FastMCP("terminal_env")

        @tools.tool
        async def bash(command: str, timeout_s: Optional[float] = None) -> dict[str, Any]:
            """Run one bash command in the task's workspace. The working directory and
            exported variables carry over to the next command."""
            action = TerminalAction(command=command, timeout_s=timeout_s)
            seen = await self._step(action)
            return {
                "output": seen.output,
                "exit_code": seen.exit_code,
                "status": seen.status,
                "cwd": seen.cwd,
                "steps_left": seen.steps_left,
                "done": seen.done,
            }

        @tools.tool
        async def submit() -> dict[str, Any]:
            """Hand in: the task's verifier decides the reward, and the episode ends."""
            seen = await self._step(TerminalAction(submit=True))
            return dict(seen.metadata["verification"])

        super().__init__(tools)

    async def _step(self, action: TerminalAction) -> TerminalObservation:
        # Commands block for seconds: off the event loop, which serves other sessions.
        self._last = await asyncio.to_thread(self.shell.step, action)
        return self._last

    def reset(
        self, seed: Optional[int] = None, episode_id: Optional[str] = None, **kwargs: Any
    ) -> TerminalObservation:
        self._last = None
        return self.shell.reset(seed=seed, episode_id=episode_id, **kwargs)

    async def reset_async(
        self, seed: Optional[int] = None, episode_id: Optional[str] = None, **kwargs: Any
    ) -> TerminalObservation:
        return await asyncio.to_thread(self.reset, seed, episode_id, **kwargs)

    async def step_async(
        self, action: Action, timeout_s: Optional[float] = None, **kwargs: Any
    ) -> Observation:
        self._last = None
        if isinstance(action, CallToolAction) and self.shell.state.submitted:
            raise InvalidActionError("the episode is over (verified): call reset()")
        # A tool call may take as long as its command and the verifier after it.
        task = self.shell.task
        if task is not None:
            needed = task.spec.command_timeout_s + task.spec.verify_timeout_s + 30.0
            timeout_s = max(timeout_s or 0.0, needed)
        observation = await super().step_async(action, timeout_s=timeout_s, **kwargs)
        if self._last is not None:
            observation.reward = self._last.reward
            observation.done = self._last.done
        return observation

    @property
    def state(self) -> TerminalState:
        return self.shell.state

    @property
    def host_workspace(self) -> Path:
        """The episode's folder on the host (`TerminalEnvironment.host_workspace`)."""
        return self.shell.host_workspace

    def close(self) -> None:
        self.shell.close()
        super().close()
