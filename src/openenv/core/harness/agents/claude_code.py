"""Claude Code (npm `@anthropic-ai/claude-code`) as an RFC 005 harness.

One long-lived `claude -p --input-format stream-json --output-format stream-json --verbose`
per episode, in an `openenv.sandbox.Sandbox` on the episode's working folder: each turn is one
user message written to it, and ends with its `result` line. One process keeps everything a
session has (`--resume` would restore the messages but not, e.g., which files were read, which
its Edit tool requires). Its HOME is a private folder outside the workspace. The
environment's tools reach it as the MCP server `env` (`--mcp-config`, type http, the bridge);
its model calls go to `config.model_url` (the capture proxy) in the Anthropic dialect.
Telemetry, auto-update and other non-essential traffic are off; under bubblewrap there is no
network but the relays anyway.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar, Optional

from openenv import settings

from ..adapter import (
    AgenticHarnessAdapter,
    HarnessError,
    HarnessNotRunningError,
    HarnessStartupError,
)
from ..config import HarnessConfig
from ..events import HarnessEvent, HarnessEventType
from ._common import AgentSandbox, agent_failed, stop_agent, turn_frames

#: The MCP server name the environment's tools appear under (`mcp__env__<tool>`).
MCP_SERVER_NAME = "env"
DEFAULT_MODEL = "claude-sonnet-4-5"
#: Where the tests (and `.ci/run`) install Claude Code: `npm install --prefix` this folder.
TEST_INSTALL_PREFIX = Path.home() / ".cache" / "openenv-tests" / "claude-code"

_QUIET_ENV = {
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
}


def find_claude(explicit: Optional[str] = None) -> Optional[str]:
    """The `claude` executable: `explicit`, else `$OPENENV_CLAUDE_CODE`, else PATH, else the
    tests' install folder; None if there is none."""
    for candidate in (
        explicit,
        settings.CLAUDE_CODE.get(),
        shutil.which("claude"),
        str(TEST_INSTALL_PREFIX / "node_modules" / ".bin" / "claude"),
    ):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


#: Claude Code's result when a reply stopped at the token limit ("Claude's response exceeded
#: the 32000 output token maximum ..."), whatever limit it names.
_OVERLONG = re.compile(r"exceeded the \d+ output token maximum")


class ClaudeCodeAdapter(AgenticHarnessAdapter):
    """Claude Code, one long-lived session per episode (see the module docstring).

    `config.command`, when given, is the `claude` executable (and any extra arguments);
    `config.model` the model name it asks for; `config.api_key_env_var` names the host
    variable holding the key it sends (the capture session key), else a placeholder.
    """

    #: Its tools across 2.x releases. (Claude Code itself namespaces MCP tools as
    #: `mcp__env__<name>`, so these matter for `resolve_tool_conflicts`' contract only.)
    BUILTIN_TOOL_NAMES: ClassVar[frozenset[str]] = frozenset(
        {
            "Bash",
            "BashOutput",
            "CronCreate",
            "CronDelete",
            "CronList",
            "Edit",
            "EnterWorktree",
            "ExitPlanMode",
            "ExitWorktree",
            "Glob",
            "Grep",
            "KillShell",
            "MultiEdit",
            "NotebookEdit",
            "NotebookRead",
            "Read",
            "ReportFindings",
            "ScheduleWakeup",
            "SendMessage",
            "Skill",
            "SlashCommand",
            "Task",
            "TaskCreate",
            "TaskGet",
            "TaskList",
            "TaskOutput",
            "TaskStop",
            "TaskUpdate",
            "TodoWrite",
            "WebFetch",
            "WebSearch",
            "Workflow",
            "Write",
        }
    )
    #: Built-ins allowed without a permission prompt (nothing interactive can answer one).
    ALLOWED_TOOLS: ClassVar[tuple[str, ...]] = (
        "Bash",
        "Edit",
        "Glob",
        "Grep",
        "MultiEdit",
        "Read",
        "TodoWrite",
        "Write",
    )

    def __init__(
        self,
        config: Optional[HarnessConfig] = None,
        *,
        sandbox_backend: Optional[str] = None,
        model_attempts: int = 3,
        tools: Optional[list[str]] = None,
        system_prompt: Optional[str] = None,
    ) -> None:
        """`model_attempts`: tries of one model call before the turn fails (an infrastructure
        error); Claude Code's own default retries for minutes.

        `tools` limits Claude Code's built-in tools (`--tools`, e.g. ``["Bash", "Read",
        "Edit"]``; the environment's MCP tools are always offered) and `system_prompt` replaces
        its system prompt (`--system-prompt`). Its defaults (every tool, its own prompt) take
        about 22,000 tokens per request: for a model with a small context (an 8k one, like the
        local SmolLM2), both together bring a request under 2,000."""
        super().__init__(config or HarnessConfig(name="claude-code"))
        self.sandbox_backend = sandbox_backend
        self.model_attempts = model_attempts
        self.tools = list(tools) if tools is not None else None
        self.system_prompt = system_prompt
        self._bridge_url: Optional[str] = None
        self._sandbox: Optional[AgentSandbox] = None
        self._session_id: Optional[str] = None
        self._process: Any = None
        self._real_executable = ""

    def tool_reference(self, name: str) -> str:
        return f"mcp__{MCP_SERVER_NAME}__{name}"

    async def inject_tools(self, tools: list[Any], bridge_url: Optional[str] = None) -> None:
        # Claude Code lists the bridge's tools itself over MCP.
        self._bridge_url = bridge_url if tools else None

    async def start(self, working_directory: str) -> None:
        await self.stop()
        if not self.config.model_url:
            raise HarnessStartupError(
                "Claude Code needs HarnessConfig.model_url (the capture proxy, or the model)"
            )
        executable = find_claude(self.config.command[0] if self.config.command else None)
        if executable is None:
            raise HarnessStartupError(
                "Claude Code is not installed: `npm install -g @anthropic-ai/claude-code`, or "
                "set OPENENV_CLAUDE_CODE to its `claude` executable"
            )
        try:
            sandbox, self._real_executable = await asyncio.to_thread(
                self._prepare, working_directory, executable
            )
        except Exception as exc:
            raise HarnessStartupError(f"could not make Claude Code's sandbox: {exc}") from exc
        self._sandbox = sandbox
        try:
            self._process = sandbox.spawn(self._argv(), env=self._env())
        except BaseException:
            await self.stop()
            raise
        self._session_id = None

    def _prepare(self, working_directory: str, executable: str) -> tuple[AgentSandbox, str]:
        real = Path(executable).resolve()  # the npm shim's target: its folder is bound in
        sandbox = AgentSandbox(
            working_directory,
            {"model": self.config.model_url, "mcp": self._bridge_url},
            backend=self.sandbox_backend,
            ro_binds=[real.parent],
            env=self.config.env_vars,
        )
        return sandbox, str(real)

    def _argv(self) -> list[str]:
        assert self._sandbox is not None
        argv = [self._real_executable, *self.config.command[1:], "-p", "--verbose"]
        argv += ["--input-format", "stream-json", "--output-format", "stream-json"]
        argv += ["--model", self.config.model or DEFAULT_MODEL]
        argv += ["--permission-mode", "acceptEdits", "--strict-mcp-config"]
        if self.tools is not None:
            argv += ["--tools", ",".join(self.tools)]
        if self.system_prompt is not None:
            argv += ["--system-prompt", self.system_prompt]
        allowed = [t for t in self.ALLOWED_TOOLS if self.tools is None or t in self.tools]
        if "mcp" in self._sandbox.urls:
            servers = {MCP_SERVER_NAME: {"type": "http", "url": self._sandbox.urls["mcp"]}}
            argv += ["--mcp-config", json.dumps({"mcpServers": servers})]
            allowed.append(f"mcp__{MCP_SERVER_NAME}")
        argv += ["--allowedTools", ",".join(allowed)]
        return argv

    def _env(self) -> dict[str, str]:
        assert self._sandbox is not None
        key = self.config.api_key()
        return {
            **_QUIET_ENV,
            "ANTHROPIC_BASE_URL": self._sandbox.urls["model"],
            "ANTHROPIC_API_KEY": key or "openenv-harness",
            "CLAUDE_CODE_MAX_RETRIES": str(max(0, self.model_attempts - 1)),
        }

    async def send_message_streaming(self, message: str) -> AsyncIterator[HarnessEvent]:
        process = self._process
        if process is None or not process.alive():
            raise HarnessNotRunningError("Claude Code is not running: call start() first")
        frame = {"type": "user", "message": {"role": "user", "content": message}}
        try:
            process.stdin.write((json.dumps(frame) + "\n").encode())
            process.stdin.flush()
        except OSError as exc:
            raise agent_failed("Claude Code stopped taking messages", process) from exc
        yield HarnessEvent(
            type=HarnessEventType.LLM_REQUEST,
            data={
                "messages": [{"role": "user", "content": message}],
                "model": self.config.model or DEFAULT_MODEL,
                "session_id": self._session_id,
            },
        )
        tool_names: dict[str, str] = {}
        timeout_s = self.config.session_timeout_s
        async for line in turn_frames(process, timeout_s, self.stop, "Claude Code"):
            for event in self._events_of(line, tool_names):
                yield event
                if event.type == HarnessEventType.TURN_COMPLETE:
                    return

    def _events_of(self, frame: dict[str, Any], tool_names: dict[str, str]) -> list[HarnessEvent]:
        """HarnessEvents for one line of Claude Code's stream-json."""
        kind = frame.get("type")
        if frame.get("session_id"):
            self._session_id = str(frame["session_id"])
        events: list[HarnessEvent] = []
        if kind == "assistant":
            message = frame.get("message") or {}
            blocks = message.get("content") or []
            text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
            calls = [b for b in blocks if b.get("type") == "tool_use"]
            events.append(
                HarnessEvent(
                    type=HarnessEventType.LLM_RESPONSE,
                    data={
                        "content": text,
                        "usage": message.get("usage"),
                        "message_id": message.get("id"),
                        "tool_calls": [
                            {"name": c.get("name"), "arguments": c.get("input")} for c in calls
                        ],
                    },
                )
            )
            for call in calls:
                tool_names[str(call.get("id"))] = str(call.get("name"))
                events.append(
                    HarnessEvent(
                        type=HarnessEventType.TOOL_CALL,
                        data={
                            "tool_name": call.get("name"),
                            "arguments": call.get("input") or {},
                            "tool_call_id": call.get("id"),
                        },
                    )
                )
        elif kind == "user":
            for block in (frame.get("message") or {}).get("content") or []:
                if not isinstance(block, dict) or block.get("type") != "tool_result":
                    continue
                result = block.get("content")
                if isinstance(result, list):
                    result = "".join(
                        part.get("text", "") for part in result if isinstance(part, dict)
                    )
                failed = bool(block.get("is_error"))
                events.append(
                    HarnessEvent(
                        type=HarnessEventType.TOOL_RESULT,
                        data={
                            "tool_name": tool_names.get(str(block.get("tool_use_id")), ""),
                            "result": result,
                            "error": result if failed else None,
                            "tool_call_id": block.get("tool_use_id"),
                        },
                    )
                )
        elif kind == "result":
            if frame.get("is_error") and _OVERLONG.search(str(frame.get("result") or "")):
                # The model's own answer ran into its token limit (Claude Code gives up on such
                # a reply): what the model said, not a broken model call. The turn ends.
                events.append(
                    HarnessEvent(
                        type=HarnessEventType.ERROR,
                        data={"message": str(frame.get("result")), "recoverable": True},
                    )
                )
                frame = {**frame, "subtype": "success", "result": ""}
            elif frame.get("is_error") and frame.get("subtype") == "success":
                # The model call itself failed (unreachable, refused): infrastructure.
                raise HarnessError(f"Claude Code's model call failed: {frame.get('result')}")
            if frame.get("subtype") != "success":
                events.append(
                    HarnessEvent(
                        type=HarnessEventType.ERROR,
                        data={"message": str(frame.get("subtype")), "recoverable": True},
                    )
                )
            events.append(
                HarnessEvent(
                    type=HarnessEventType.TURN_COMPLETE,
                    data={
                        "response": str(frame.get("result") or ""),
                        "done": False,
                        "session_id": frame.get("session_id"),
                        "usage": frame.get("usage"),
                        "num_turns": frame.get("num_turns"),
                    },
                )
            )
        return events

    async def is_alive(self) -> bool:
        return self._process is not None and self._process.alive()

    async def stop(self) -> None:
        process, self._process = self._process, None
        sandbox, self._sandbox = self._sandbox, None
        stop_agent(process, sandbox)
        self._session_id = None
