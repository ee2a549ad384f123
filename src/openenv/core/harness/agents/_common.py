"""What the real agent adapters share: a sandbox whose only ways out are the model endpoint and
the MCP bridge (through `relay`), and reading an agent's JSON-line output without blocking the
event loop."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import tempfile
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Optional, Union

from ..adapter import HarnessError, HarnessStartupError, HarnessTurnTimeoutError
from .relay import HostRelay, relay_argv, relayed_url

# Ports the relays listen on inside the sandbox's own network namespace (nothing else is there).
_RELAY_PORTS = {"model": 18101, "mcp": 18102}


def agent_limits() -> Any:
    """Limits for a long-lived agent: no CPU or wall-clock ceiling of its own (the adapter
    bounds each turn), room for a Node agent, and no network but the relays."""
    from openenv.sandbox import SandboxLimits

    return SandboxLimits(
        wall_time_s=24 * 3600,
        cpu_time_s=None,
        memory_mb=4096,
        max_processes=512,
        max_output_bytes=100_000_000,
        max_file_mb=512,
        network=False,
    )


class AgentProcess:
    """A sandboxed agent process whose stderr is drained as it comes (a full pipe would stall
    the agent mid-turn); its end is kept for error messages."""

    def __init__(self, process: Any, keep_bytes: int = 8192) -> None:
        self.process = process
        self._keep = keep_bytes
        self._tail = bytearray()
        self._lock = threading.Lock()
        threading.Thread(target=self._drain, name="openenv-agent-stderr", daemon=True).start()

    @property
    def stdin(self) -> Any:
        return self.process.stdin

    @property
    def stdout(self) -> Any:
        return self.process.stdout

    def alive(self) -> bool:
        return bool(self.process.alive())

    def kill(self) -> None:
        self.process.kill()

    def _drain(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            while chunk := self.process.stderr.read1(4096):
                with self._lock:
                    self._tail += chunk
                    del self._tail[: -self._keep]

    def stderr_tail(self, limit: int = 2000) -> str:
        with self._lock:
            return bytes(self._tail[-limit:]).decode("utf-8", "replace").strip()


class AgentSandbox:
    """An `openenv.sandbox.Sandbox` on the episode's working folder, plus the relays.

    Under bubblewrap the agent sees the model at `urls["model"]` and the bridge at
    `urls["mcp"]` (loopback ports relayed to Unix sockets bound in from the host); nothing else
    is reachable. Under the process backend (no isolation to keep) it connects directly.
    """

    def __init__(
        self,
        working_directory: Union[str, Path],
        endpoints: Mapping[str, Optional[str]],
        *,
        backend: Optional[str] = None,
        limits: Any = None,
        ro_binds: Sequence[Union[str, Path]] = (),
        env: Optional[Mapping[str, str]] = None,
    ) -> None:
        from openenv.isolation.bubblewrap import SANDBOX_GID, SANDBOX_UID
        from openenv.sandbox import Sandbox

        self.box = Sandbox(
            working_directory,
            limits=limits or agent_limits(),
            backend=backend,
            ro_binds=ro_binds,
            env=dict(env or {}),
        )
        # The agent's own state (sessions, caches) lives outside the workspace, so it never
        # shows in the environment's files or diff.
        self.home = Path(tempfile.mkdtemp(prefix="openenv-agent-home-"))
        self.box.give_to_sandbox_user(self.home)
        present = {name: url for name, url in endpoints.items() if url}
        self.urls: dict[str, str] = {}
        self._forwards: list[tuple[int, str]] = []
        self.relay: Optional[HostRelay] = None
        if self.box.backend == "bubblewrap" and present:
            owner = (SANDBOX_UID, SANDBOX_GID) if os.geteuid() == 0 else None
            self.relay = HostRelay(present, owner=owner)
            try:
                self.relay.start()
            except Exception:
                self.close()
                raise
            for name, url in present.items():
                port = _RELAY_PORTS.get(name) or 18200 + len(self._forwards)
                self._forwards.append((port, self.relay.socket_path(name)))
                self.urls[name] = relayed_url(url, port)
        else:
            self.urls = dict(present)

    def argv(self, command: Sequence[str]) -> list[str]:
        """`command` behind the relays (when there are any)."""
        if not self._forwards:
            return list(command)
        return relay_argv(self.box.python, self._forwards, command)

    def spawn(
        self, command: Sequence[str], *, env: Optional[Mapping[str, str]] = None
    ) -> AgentProcess:
        binds = [str(self.home)]
        if self.relay is not None:
            binds.append(str(self.relay.folder))
        try:
            process = self.box.spawn(
                self.argv(command),
                env={"HOME": str(self.home), **(env or {})},
                cwd=self.box.workspace,
                binds=binds,
            )
        except OSError as exc:
            raise HarnessStartupError(f"could not start the agent in its sandbox: {exc}") from exc
        return AgentProcess(process)

    def close(self) -> None:
        self.box.close()
        if self.relay is not None:
            self.relay.stop()
        shutil.rmtree(self.home, ignore_errors=True)


async def read_json_line(
    stream: Any, timeout_s: float, *, deadline: Optional[float] = None
) -> Optional[dict[str, Any]]:
    """The next JSON object line of `stream` (non-JSON lines are skipped); None at EOF.
    Raises HarnessTurnTimeoutError after `timeout_s`, or at `deadline` (the loop's clock) (the
    caller then kills the process, which ends the blocked read)."""
    loop = asyncio.get_running_loop()
    if deadline is None:
        deadline = loop.time() + timeout_s
    while True:
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise HarnessTurnTimeoutError(f"no answer from the agent within {timeout_s:g}s")
        try:
            line = await asyncio.wait_for(
                loop.run_in_executor(None, stream.readline), timeout=remaining
            )
        except asyncio.TimeoutError:
            raise HarnessTurnTimeoutError(
                f"no answer from the agent within {timeout_s:g}s"
            ) from None
        if not line:
            return None
        with contextlib.suppress(ValueError):
            value = json.loads(line)
            if isinstance(value, dict):
                return value


async def turn_frames(
    process: AgentProcess, timeout_s: float, stop: Callable[[], Awaitable[None]], agent: str
) -> AsyncIterator[dict[str, Any]]:
    """The JSON lines the agent prints during one turn, within `timeout_s` in all: on a timeout
    `stop` ends the agent and HarnessTurnTimeoutError is raised; an agent that exits mid-turn
    raises HarnessError with what it printed last."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        try:
            frame = await read_json_line(process.stdout, timeout_s, deadline=deadline)
        except HarnessTurnTimeoutError:
            await stop()
            raise
        if frame is None:
            raise agent_failed(f"{agent} exited during the turn", process)
        yield frame


def tool_summaries(tools: Sequence[Any]) -> list[dict[str, Any]]:
    """Name, description and input schema of MCP tools given as objects or dicts."""
    summaries = []
    for tool in tools:
        get = tool.get if isinstance(tool, dict) else lambda key, t=tool: getattr(t, key, None)
        schema = get("inputSchema") or get("input_schema") or get("parameters") or {}
        summaries.append(
            {"name": str(get("name")), "description": get("description") or "", "schema": schema}
        )
    return summaries


def stop_agent(process: Optional[AgentProcess], sandbox: Optional[AgentSandbox]) -> None:
    """Kill the agent, then its sandbox (and everything left in it)."""
    if process is not None:
        process.kill()
    if sandbox is not None:
        sandbox.close()


def agent_failed(message: str, process: Optional[AgentProcess] = None) -> HarnessError:
    """A HarnessError saying what the agent printed last before it failed."""
    tail = process.stderr_tail() if process is not None else ""
    return HarnessError(f"{message}: {tail}" if tail else message)


__all__ = [
    "AgentProcess",
    "AgentSandbox",
    "agent_failed",
    "agent_limits",
    "read_json_line",
    "stop_agent",
    "tool_summaries",
    "turn_frames",
]
