"""mini-swe-agent (PyPI `mini-swe-agent`) as an RFC 005 harness.

One long-lived driver process (`mini_swe_driver`) per episode, inside an
`openenv.sandbox.Sandbox` on the episode's working folder, keeps mini-swe-agent's own agent
(its `DefaultAgent`, on its `mini` config) and so the conversation across turns. Its only tool
is bash; the environment's MCP tools reach it as the `openenv-tool` command on its PATH (listed
in its system prompt, and named so in an episode's opening message). It talks to
`config.model_url` (the capture proxy) with the OpenAI chat dialect, through litellm.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar, Optional

from ..adapter import (
    AgenticHarnessAdapter,
    HarnessError,
    HarnessNotRunningError,
    HarnessStartupError,
    HarnessTurnTimeoutError,
)
from ..config import HarnessConfig
from ..events import HarnessEvent, HarnessEventType
from ..tools import tools_line
from ._common import (
    AgentSandbox,
    agent_failed,
    read_json_line,
    stop_agent,
    tool_summaries,
    turn_frames,
)
from .mini_swe_driver import KEY_VARIABLE
from .tool_cli import URL_VARIABLE

DEFAULT_MODEL = "model"


class MiniSweAgentAdapter(AgenticHarnessAdapter):
    """mini-swe-agent, one conversation per episode (see the module docstring).

    `sandbox_backend`: None picks bubblewrap when usable (see `openenv.sandbox`).
    `step_limit`: model calls allowed in one turn before it ends without an answer.
    `model_attempts`: tries of one model call before the turn fails (an infrastructure error).
    """

    BUILTIN_TOOL_NAMES: ClassVar[frozenset[str]] = frozenset({"bash"})

    def __init__(
        self,
        config: Optional[HarnessConfig] = None,
        *,
        sandbox_backend: Optional[str] = None,
        step_limit: int = 30,
        command_timeout_s: int = 60,
        model_attempts: int = 3,
    ) -> None:
        super().__init__(config or HarnessConfig(name="mini-swe-agent"))
        self.sandbox_backend = sandbox_backend
        self.step_limit = step_limit
        self.command_timeout_s = command_timeout_s
        self.model_attempts = model_attempts
        self._tools: list[dict[str, Any]] = []
        self._bridge_url: Optional[str] = None
        self._sandbox: Optional[AgentSandbox] = None
        self._process: Any = None
        self._tool_folder: Optional[Path] = None

    def tool_reference(self, name: str) -> str:
        return f"openenv-tool {name}"

    def tools_sentence(self, names: list[str]) -> str:
        if not names:
            return tools_line(["bash"])
        commands = ", ".join(f"`{self.tool_reference(name)}`" for name in names)
        return (
            f"Use the tools: bash, and through it the environment's {commands} "
            "(`openenv-tool NAME '<JSON arguments>'`; `openenv-tool --list` describes them)."
        )

    async def inject_tools(self, tools: list[Any], bridge_url: Optional[str] = None) -> None:
        self._tools = tool_summaries(tools)
        self._bridge_url = bridge_url

    async def start(self, working_directory: str) -> None:
        await self.stop()
        if not self.config.model_url:
            raise HarnessStartupError(
                "mini-swe-agent needs HarnessConfig.model_url (the capture proxy, or the model)"
            )
        try:
            await asyncio.to_thread(self._launch, working_directory)
            ready = await read_json_line(self._process.stdout, self.config.startup_timeout_s)
        except HarnessTurnTimeoutError as exc:
            await self.stop()
            raise HarnessStartupError(f"mini-swe-agent did not start: {exc}") from exc
        except BaseException:
            await self.stop()
            raise
        if not ready or ready.get("type") != "ready":
            error = agent_failed("mini-swe-agent did not start", self._process)
            await self.stop()
            raise HarnessStartupError(str(error))

    def _launch(self, working_directory: str) -> None:
        self._tool_folder = Path(tempfile.mkdtemp(prefix="openenv-tools-"))
        sandbox = AgentSandbox(
            working_directory,
            {"model": self.config.model_url, "mcp": self._bridge_url},
            backend=self.sandbox_backend,
            ro_binds=[self._tool_folder],
            env=self.config.env_vars,
        )
        self._sandbox = sandbox
        script = self._tool_folder / "openenv-tool"
        script.write_text(
            f'#!/bin/sh\nexec "{sandbox.box.python}" -m openenv.core.harness.agents.tool_cli "$@"\n'
        )
        script.chmod(0o755)
        self._tool_folder.chmod(0o755)
        env = {
            "PATH": f"{self._tool_folder}:/usr/local/bin:/usr/bin:/bin",
            KEY_VARIABLE: self.config.api_key() or "openenv-harness",
        }
        if "mcp" in sandbox.urls:
            env[URL_VARIABLE] = sandbox.urls["mcp"]
        settings = {
            "cwd": sandbox.box.workspace,
            "model": self.config.model or DEFAULT_MODEL,
            "model_url": sandbox.urls["model"],
            "step_limit": self.step_limit,
            "command_timeout_s": self.command_timeout_s,
            "model_attempts": self.model_attempts,
            "tools": [t for t in self._tools if "mcp" in sandbox.urls],
        }
        command = [sandbox.box.python, "-m", "openenv.core.harness.agents.mini_swe_driver"]
        self._process = sandbox.spawn([*command, json.dumps(settings)], env=env)

    async def send_message_streaming(self, message: str) -> AsyncIterator[HarnessEvent]:
        process = self._process
        if process is None or not process.alive():
            raise HarnessNotRunningError("mini-swe-agent is not running: call start() first")
        try:
            process.stdin.write(
                (json.dumps({"type": "message", "content": message}) + "\n").encode()
            )
            process.stdin.flush()
        except OSError as exc:
            raise agent_failed("mini-swe-agent stopped taking messages", process) from exc
        timeout_s = self.config.session_timeout_s
        async for frame in turn_frames(process, timeout_s, self.stop, "mini-swe-agent"):
            kind = frame.get("type")
            data = frame.get("data") or {}
            if kind == "fatal":
                raise HarnessError(f"mini-swe-agent failed: {data.get('message')}")
            try:
                event = HarnessEvent(type=HarnessEventType(kind), data=data)
            except ValueError:
                continue
            yield event
            if event.type == HarnessEventType.TURN_COMPLETE:
                return

    async def is_alive(self) -> bool:
        return self._process is not None and self._process.alive()

    async def stop(self) -> None:
        process, self._process = self._process, None
        sandbox, self._sandbox = self._sandbox, None
        stop_agent(process, sandbox)
        folder, self._tool_folder = self._tool_folder, None
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
