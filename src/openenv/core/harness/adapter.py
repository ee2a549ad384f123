"""The interface every agent harness implements (RFC 005's `AgenticHarnessAdapter`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from typing import Any, ClassVar, Optional

from ..errors import OpenEnvError
from .config import HarnessConfig
from .events import HarnessEvent, HarnessEventType, HarnessResponse
from .tools import tools_line


class HarnessError(OpenEnvError):
    """The harness failed: an infrastructure failure of the episode, never a reward."""

    category = "infrastructure"


class HarnessStartupError(HarnessError):
    """The harness did not start or did not become ready in time."""


class HarnessNotRunningError(HarnessError):
    """A turn was asked of a harness that is not running (no `reset()`, or it died)."""


class HarnessTurnTimeoutError(HarnessError):
    """A turn took longer than `HarnessConfig.session_timeout_s`."""


class AgenticHarnessAdapter(ABC):
    """Runs one external agent across the turns of an episode.

    The environment calls `inject_tools` (the tools the harness may use, and the MCP URL that
    serves them) and then `start`; every `step` is one `send_message_streaming`, whose last
    event must be `TURN_COMPLETE`. `stop` ends the agent and everything it started, and may be
    called any number of times.
    """

    #: Tools the harness has of its own; an environment tool of the same name gets a prefix.
    BUILTIN_TOOL_NAMES: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, config: HarnessConfig) -> None:
        self.config = config

    @abstractmethod
    async def start(self, working_directory: str) -> None: ...

    @abstractmethod
    async def stop(self) -> None: ...

    @abstractmethod
    async def inject_tools(self, tools: list[Any], bridge_url: Optional[str] = None) -> None: ...

    @abstractmethod
    def send_message_streaming(self, message: str) -> AsyncIterator[HarnessEvent]: ...

    @abstractmethod
    async def is_alive(self) -> bool: ...

    def tool_reference(self, name: str) -> str:
        """How the agent's model calls the environment tool `name` (the name
        `resolve_tool_conflicts` gave it): by that name, unless the harness says otherwise."""
        return name

    def tools_sentence(self, names: list[str]) -> str:
        """The opening message's sentence naming the environment tools `names` (as
        `resolve_tool_conflicts` named them) the way the agent sees them."""
        return tools_line(self.tool_reference(name) for name in names)

    async def send_message(self, message: str) -> HarnessResponse:
        """One whole turn: the streamed events, and the response its last event carries."""
        events = [event async for event in self.send_message_streaming(message)]
        if not events or events[-1].type != HarnessEventType.TURN_COMPLETE:
            raise HarnessError(
                f"harness {self.config.name!r} ended a turn without a turn_complete event"
            )
        last = events[-1].data
        return HarnessResponse(
            response=str(last.get("response", "")), events=events, done=bool(last.get("done"))
        )
