"""`EchoAdapter`: the test harness adapter, driving the real child process `echo_agent.py`."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Optional

from openenv.core.harness import (
    AgenticHarnessAdapter,
    HarnessConfig,
    HarnessError,
    HarnessEvent,
    HarnessEventType,
)
from openenv.core.harness.process import HarnessProcess

AGENT = Path(__file__).with_name("echo_agent.py")


class EchoAdapter(AgenticHarnessAdapter):
    """`echo` is a built-in of this harness, so an environment tool named `echo` is renamed."""

    BUILTIN_TOOL_NAMES = frozenset({"echo"})

    def __init__(self, working_directory: str, session_timeout_s: float = 60.0) -> None:
        super().__init__(
            HarnessConfig(
                name="echo-agent",
                command=[sys.executable, str(AGENT)],
                working_directory=working_directory,
                session_timeout_s=session_timeout_s,
            )
        )
        self.tools: list[Any] = []
        self.bridge_url: Optional[str] = None
        self.process: Optional[HarnessProcess] = None
        self.pids: list[int] = []

    async def inject_tools(self, tools: list[Any], bridge_url: Optional[str] = None) -> None:
        self.tools, self.bridge_url = list(tools), bridge_url

    async def start(self, working_directory: str) -> None:
        self.process = HarnessProcess(
            self.config.command,
            cwd=working_directory,
            env_vars={
                "BRIDGE_URL": self.bridge_url or "",
                "TOOLS": json.dumps([tool.name for tool in self.tools]),
            },
            startup_timeout_s=self.config.startup_timeout_s,
            terminate_grace_s=2.0,
        )
        await self.process.start(ready_check=lambda line: '"ready"' in line)
        assert self.process.pid is not None
        self.pids.append(self.process.pid)

    async def stop(self) -> None:
        if self.process is not None:
            await self.process.stop()

    async def is_alive(self) -> bool:
        return self.process is not None and self.process.is_running()

    async def send_message_streaming(self, message: str) -> AsyncIterator[HarnessEvent]:
        if self.process is None or not self.process.is_running():
            raise HarnessError("the echo agent is not running")
        await self.process.write_line(json.dumps({"message": message}))
        while True:
            line = await self.process.read_line()
            if line is None:
                raise HarnessError(f"the echo agent exited mid-turn: {self.process.drain_stderr()}")
            frame = json.loads(line)
            event = HarnessEvent(type=HarnessEventType(frame["type"]), data=frame["data"])
            yield event
            if event.type == HarnessEventType.TURN_COMPLETE:
                return
