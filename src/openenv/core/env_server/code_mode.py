"""MCP code mode in the sandbox: an agent's Python calls the environment's tools as functions.

The code runs in a fresh interpreter in `openenv.sandbox.Sandbox` (no access to the server's
objects, its network or its files). Each tool is a function there whose call travels as one
line of JSON over a Unix socket in the sandbox's workspace to the server, which runs it as any
other tool call of the session (`MCPEnvironment.call_tool_raw`: same validation, same `ctx`
state, same errors) and sends the tool's value back. Nothing but the environment's tools is
reachable on that socket: no reset, no step, no second code run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from ...sandbox import ExecResult, ExecStatus, Sandbox, SandboxError, SandboxLimits
from .mcp_types import ExecuteCodeObservation, Tool, ToolCallRecord
from .mcp_types import ToolError as ToolErrorModel

if TYPE_CHECKING:
    from .mcp_environment import MCPEnvironment

_RUNNER_SOURCE = Path(__file__).with_name("code_mode_runner.py").read_text(encoding="utf-8")
#: What `python -c` runs: the runner's source (argv[1]) under a file name tracebacks can skip.
_BOOT = "import sys; exec(compile(sys.argv[1], '<code-mode-runner>', 'exec'))"
#: Longest Unix socket path the kernel accepts (sun_path is 108 bytes with its NUL).
_MAX_SOCKET_PATH = 107
#: Connections the code may hold open on the tool socket (the runner needs one); more would
#: spend the server's file descriptors.
_MAX_CONNECTIONS = 4


class CodeModeLimits(BaseModel):
    """Ceilings for one code-mode execution (`MCPEnvironment.code_mode_limits`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    wall_time_s: float = Field(
        default=30.0, gt=0, description="The whole execution, tool calls included."
    )
    max_tool_calls: int = Field(default=50, ge=0, description="Tool calls per execution.")
    max_output_bytes: int = Field(
        default=100_000, gt=0, description="stdout plus stderr; more stops the code."
    )
    max_message_bytes: int = Field(
        default=256_000, gt=0, description="One tool call's arguments, or the result."
    )
    memory_mb: int = Field(default=512, gt=0)
    cpu_time_s: float = Field(default=30.0, gt=0)
    max_processes: int = Field(default=32, gt=0)

    def sandbox_limits(self, wall_time_s: float | None = None) -> SandboxLimits:
        return SandboxLimits(
            wall_time_s=wall_time_s or self.wall_time_s,
            cpu_time_s=self.cpu_time_s,
            memory_mb=self.memory_mb,
            max_processes=self.max_processes,
            max_output_bytes=self.max_output_bytes,
            network=False,
        )


@dataclass
class _Run:
    """The tool side of one execution."""

    env: MCPEnvironment
    limits: CodeModeLimits
    deadline: float
    calls: list[ToolCallRecord] = field(default_factory=list)
    refused: int = 0
    finish: dict[str, Any] | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    line = await reader.readline()
                except (ValueError, asyncio.LimitOverrunError):
                    await self._reply(
                        writer,
                        _refusal(
                            "message_too_large",
                            f"a message is larger than {self.limits.max_message_bytes} bytes",
                        ),
                    )
                    return
                if not line:
                    return
                try:
                    message = json.loads(line)
                except ValueError:
                    return
                if not isinstance(message, dict):
                    return
                if message.get("op") == "finish":
                    if self.finish is None:
                        self.finish = message
                    continue
                if message.get("op") != "call":
                    await self._reply(writer, _refusal("bad_request", "unknown operation"))
                    continue
                await self._reply(writer, await self._call(message))
        except (ConnectionError, OSError):
            return
        finally:
            writer.close()

    async def _call(self, message: dict[str, Any]) -> dict[str, Any]:
        from .mcp_environment import ToolCallFailed, tool_data

        name, arguments = message.get("tool"), message.get("arguments")
        if not isinstance(name, str) or not isinstance(arguments, dict):
            return _refusal("bad_request", "a call needs a tool name and an arguments object")
        if len(self.calls) >= self.limits.max_tool_calls:
            self.refused += 1
            return _refusal(
                "call_limit",
                f"the limit of {self.limits.max_tool_calls} tool calls per execution is reached",
            )
        record = ToolCallRecord(tool_name=name, arguments=arguments)
        self.calls.append(record)
        # One tool call at a time, as the session's own steps run.
        async with self.lock:
            left = max(0.001, self.deadline - time.monotonic())
            try:
                raw = await self.env.call_tool_raw(name, arguments, timeout_s=left)
            except ToolCallFailed as failed:
                record.error = ToolErrorModel(error_type=failed.error_type, message=failed.message)
                return _refusal(failed.error_type.value, failed.message)
        record.result = tool_data(raw)
        return {"ok": True, "value": record.result}

    @staticmethod
    async def _reply(writer: asyncio.StreamWriter, reply: dict[str, Any]) -> None:
        writer.write(json.dumps(reply, default=repr).encode() + b"\n")
        await writer.drain()


def _refusal(error_type: str, message: str) -> dict[str, Any]:
    return {"ok": False, "error_type": error_type, "message": message}


def tool_specs(tools: list[Tool], functions: dict[str, Any]) -> list[dict[str, Any]]:
    """What the runner needs to make each tool a function: its parameters in schema order, and
    the qualified name of the function behind it (Python's TypeErrors name it)."""
    specs = []
    for tool in tools:
        schema = tool.input_schema or {}
        specs.append(
            {
                "name": tool.name,
                "qualname": getattr(functions.get(tool.name), "__qualname__", tool.name),
                "description": tool.description or "",
                "parameters": list((schema.get("properties") or {}).keys()),
                "required": list(schema.get("required") or []),
            }
        )
    return specs


async def run_code(
    env: MCPEnvironment,
    sandbox: Sandbox,
    code: str,
    limits: CodeModeLimits,
    wall_time_s: float | None = None,
) -> tuple[ExecuteCodeObservation, dict[str, Any] | None]:
    """Run `code` in `sandbox` with the environment's tools as functions; also returns the
    exception the code raised, as the runner reported it (type, message, whether it was a
    syntax error). Raises `SandboxError` when the sandbox cannot run the code (an
    infrastructure failure, never the agent's)."""
    wall = min(wall_time_s or limits.wall_time_s, limits.wall_time_s)
    name = f".openenv-tools-{secrets.token_hex(6)}.sock"
    host_socket = sandbox.host_path(name)
    if len(str(host_socket)) > _MAX_SOCKET_PATH:
        raise SandboxError(
            f"the code-mode socket path {str(host_socket)!r} is too long for a Unix socket; "
            "put sandbox workspaces in a shorter folder (OPENENV_SANDBOX_ROOT)"
        )
    run = _Run(env=env, limits=limits, deadline=time.monotonic() + wall)
    handlers: set[asyncio.Task[None]] = set()

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if sum(not t.done() for t in handlers) >= _MAX_CONNECTIONS:
            writer.close()
            return
        task = asyncio.current_task()
        if task is not None:
            handlers.add(task)
        await run.serve(reader, writer)

    spec = {
        "code": code,
        "tools": tool_specs(await env.list_tools(), await env.tool_functions()),
        "socket": f"{sandbox.workspace}/{name}",
        "max_message_bytes": limits.max_message_bytes,
    }
    server = await asyncio.start_unix_server(
        on_connect, path=str(host_socket), limit=limits.max_message_bytes
    )
    try:
        # The interpreter may run as another user (nobody, under a root server); the workspace
        # around the socket is private to the sandbox already.
        host_socket.chmod(0o666)
        argv = [sandbox.python, "-I", "-c", _BOOT, _RUNNER_SOURCE]
        result = await asyncio.to_thread(
            sandbox.run,
            argv,
            stdin=json.dumps(spec),
            limits=limits.sandbox_limits(wall),
        )
        result.check()
        # The finish message may still be in flight when the process has exited.
        for _ in range(50):
            if run.finish is not None or not any(not t.done() for t in handlers):
                break
            await asyncio.sleep(0.01)
    finally:
        server.close()
        for task in handlers:
            task.cancel()
        with contextlib.suppress(Exception):
            await server.wait_closed()
        with contextlib.suppress(OSError):
            host_socket.unlink()
    error_info = (run.finish or {}).get("error")
    return _observation(result, run, wall), error_info if isinstance(error_info, dict) else None


def _observation(result: ExecResult, run: _Run, wall: float) -> ExecuteCodeObservation:
    finish = run.finish or {}
    error_info = finish.get("error")
    status, error = "ok", None
    if result.status not in (ExecStatus.OK, ExecStatus.ERROR):
        status = result.status.value
        if result.status is ExecStatus.TIMEOUT:
            error = f"TimeoutError: the code ran past its {wall:g} s limit and was stopped"
        else:
            error = f"{status}: {result.message}"
    elif isinstance(error_info, dict):
        status = "error"
        error = f"{error_info.get('type', 'Exception')}: {error_info.get('message', '')}"
    elif run.finish is None:
        status = "error"
        error = (
            f"the interpreter ended (exit status {result.exit_code}) before the code finished"
            + (f": {result.stderr.strip().splitlines()[-1]}" if result.stderr.strip() else "")
        )
    return ExecuteCodeObservation(
        status=status,
        result=finish.get("result"),
        stdout=result.stdout,
        stderr=result.stderr,
        error=error,
        tool_calls=run.calls,
        metadata={
            "backend": result.backend,
            "duration_s": result.duration_s,
            **({"tool_calls_refused": run.refused} if run.refused else {}),
        },
    )


def compat_metadata(
    observation: ExecuteCodeObservation, exception: dict[str, Any] | None
) -> dict[str, Any]:
    """OpenEnv's `execute_code()` metadata: `{"result": value}` or `{"error": text}`, the text
    being the exception's message alone ("Syntax error: ..." for code that does not compile)."""
    if exception is not None:
        message = str(exception.get("message", ""))
        return {"error": f"Syntax error: {message}" if exception.get("syntax") else message}
    if observation.error is not None:
        return {"error": observation.error}
    return {"result": observation.result}
