"""`HarnessEnvironment`: an external agent harness inside an environment (RFC 005).

One `step(HarnessAction(message=...))` is one conversational turn with a long-lived agent
process; the environment's MCP tools reach the agent through `HarnessMCPBridge`, and the agent
can never drive the episode itself (`reset`/`step`/`state`/`close` are not bridged).

Unlike OpenEnv, a turn that fails because the harness crashed or ran out of time is not scored:
its observation has `reward=None` and `metadata["category"] == "infrastructure"` (the same
category the project's errors carry), so a trainer drops or retries the episode instead of
learning from a reward of 0 the agent never earned.

Every model call of the harness goes through a recording proxy (`capture.CaptureServer`) that
the environment starts in front of `config.model_url`: the agent is given the proxy's URL and a
per-episode session key instead of the trainer's endpoint and key, and each turn's observation
carries the turn's calls (`metadata["model_calls"]`: messages, tool calls, usage, timing, and
token ids and logprobs when the endpoint returns them), so a rollout can be trained on.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Optional

from fastmcp import FastMCP

from ..env_server.mcp_environment import MCPEnvironment
from ..env_server.mcp_types import CallToolAction, ListToolsAction
from ..env_server.types import Action, Observation, State
from ..utils import run_coroutine_sync
from .adapter import (
    AgenticHarnessAdapter,
    HarnessError,
    HarnessNotRunningError,
    HarnessTurnTimeoutError,
)
from .bridge import HarnessMCPBridge, build_bridge_server
from .events import HarnessEvent, HarnessEventType, events_to_metadata
from .tools import resolve_tool_conflicts

if TYPE_CHECKING:
    from .capture import CaptureServer

#: Where a turn's events go as they happen (the `/harness` WebSocket sets it for its turns).
EventSink = Callable[[HarnessEvent], Awaitable[None]]
turn_event_sink: ContextVar[Optional[EventSink]] = ContextVar("turn_event_sink", default=None)

#: `metadata["error_type"]` of a failed turn.
HARNESS_CRASHED = "harness_crashed"
TURN_TIMEOUT = "turn_timeout"

#: The variable that holds the agent's key to the recording proxy (its capture session id).
CAPTURE_KEY_VARIABLE = "OPENENV_CAPTURE_SESSION"


class HarnessAction(Action):
    """One user message to the harness: one turn."""

    message: str


class HarnessEnvironment(MCPEnvironment):
    """Runs `adapter`'s harness for an episode; `mcp` holds the tools it may use.

    `reset` starts a fresh harness (stopping the previous one and its bridge); each
    `HarnessAction` is one turn, bounded by `config.session_timeout_s` (or the step's
    `timeout_s`); `ListToolsAction` / `CallToolAction` still reach the tools directly. The
    rubric scores every successful turn, and a trajectory rubric the whole episode when a turn
    ends it. `capture_model_calls` (on by default) puts the recording proxy in front of
    `config.model_url` (see the module docstring); turn it off only when the URL already is one.
    """

    SUPPORTS_CONCURRENT_SESSIONS = False

    def __init__(
        self,
        adapter: AgenticHarnessAdapter,
        mcp: Optional[FastMCP] = None,
        rubric: Any = None,
        transform: Any = None,
        *,
        capture_model_calls: bool = True,
    ) -> None:
        super().__init__(
            mcp if mcp is not None else FastMCP(name="harness-environment"),
            transform=transform,
            rubric=rubric,
        )
        self.adapter = adapter
        self._bridge: Optional[HarnessMCPBridge] = None
        self._state = State(episode_id=None, step_count=0)
        self._trajectory: list[HarnessEvent] = []
        self._running = False
        self._capture_enabled = capture_model_calls
        self._capture: Optional[CaptureServer] = None
        self._capture_session: Optional[str] = None
        self._model_calls: list[dict[str, Any]] = []
        #: The configuration the user gave (the adapter's is rewritten to use the proxy).
        self._given_config = adapter.config

    # -- episode -------------------------------------------------------------------------

    @property
    def state(self) -> State:
        return self._state

    @property
    def trajectory(self) -> list[HarnessEvent]:
        """Every event of the episode so far (copies)."""
        return [event.model_copy(deep=True) for event in self._trajectory]

    @property
    def model_calls(self) -> list[dict[str, Any]]:
        """Every model call of the episode so far, as the recording proxy saw it."""
        return [dict(call) for call in self._model_calls]

    @property
    def bridge_url(self) -> Optional[str]:
        return self._bridge.url if self._bridge is not None else None

    def reset(
        self, seed: Optional[int] = None, episode_id: Optional[str] = None, **kwargs: Any
    ) -> Observation:
        return run_coroutine_sync(self.reset_async(seed=seed, episode_id=episode_id, **kwargs))

    async def reset_async(
        self, seed: Optional[int] = None, episode_id: Optional[str] = None, **kwargs: Any
    ) -> Observation:
        await self._stop_harness()
        self._state = State(episode_id=episode_id or str(uuid.uuid4()), step_count=0)
        self._trajectory = []
        self._model_calls = []
        await self._reset_rubric_async()  # the server does it too; in process, this does
        # Mode-specific tools are not on the FastMCP server, so they are never bridged.
        tools = [tool for tool in await self.list_tools() if tool.name not in self._mode_tools]
        resolved = resolve_tool_conflicts(tools, self.adapter.BUILTIN_TOOL_NAMES)
        renames = {
            new.name: old.name
            for new, old in zip(resolved, tools, strict=True)
            if new.name != old.name
        }
        url = None
        try:
            if resolved:
                bridge = HarnessMCPBridge(await build_bridge_server(self.mcp_server, renames))
                self._bridge = bridge
                url = await asyncio.to_thread(bridge.start)
            await self._route_model_calls()
            await self.adapter.inject_tools(resolved, url)
            await self.adapter.start(self.adapter.config.working_directory)
        except BaseException:
            await self._stop_harness()
            raise
        self._running = True
        return Observation(
            done=False,
            reward=0.0,
            metadata={
                "episode_id": self._state.episode_id,
                "injected_tools": [tool.name for tool in resolved],
            },
        )

    async def _route_model_calls(self) -> None:
        """Point the harness at the recording proxy, under a session of its own per episode."""
        given = self._given_config
        if not self._capture_enabled or not given.model_url:
            return
        if self._capture is None:
            from .capture import CaptureServer

            # The trainer's key (if any) goes upstream only; the agent never sees it.
            capture = CaptureServer(llm_url=given.model_url, api_key=given.api_key() or None)
            await asyncio.to_thread(capture.start)
            self._capture = capture
        session = f"episode-{uuid.uuid4().hex}"
        self._capture.register_session(session)
        self._capture_session = session
        self.adapter.config = given.model_copy(
            update={
                "model_url": self._capture.url,
                "api_key_env_var": CAPTURE_KEY_VARIABLE,
                "env_vars": {**given.env_vars, CAPTURE_KEY_VARIABLE: session},
            }
        )

    def _drain_model_calls(self) -> list[dict[str, Any]]:
        """The calls made since the last drain (this turn's), kept for the episode too."""
        if self._capture is None or self._capture_session is None:
            return []
        calls = [call.to_dict() for call in self._capture.drain(self._capture_session)]
        self._model_calls.extend(calls)
        return calls

    async def _stop_harness(self) -> None:
        self._running = False
        bridge, self._bridge = self._bridge, None
        try:
            await self.adapter.stop()
        finally:
            if bridge is not None:
                await asyncio.to_thread(bridge.stop)
            session, self._capture_session = self._capture_session, None
            if session is not None and self._capture is not None:
                self._model_calls.extend(call.to_dict() for call in self._capture.drain(session))
                self._capture.unregister_session(session)

    # -- steps ---------------------------------------------------------------------------

    async def step_async(
        self, action: Action, timeout_s: Optional[float] = None, **kwargs: Any
    ) -> Observation:
        if isinstance(action, (ListToolsAction, CallToolAction)):
            return await super().step_async(action, timeout_s=timeout_s, **kwargs)
        if isinstance(action, HarnessAction):
            return await self._step_impl_async(action, timeout_s=timeout_s, **kwargs)
        raise TypeError(
            f"{type(self).__name__} accepts HarnessAction, ListToolsAction and CallToolAction, "
            f"not {type(action).__name__}"
        )

    def _step_impl(
        self, action: Action, timeout_s: Optional[float] = None, **kwargs: Any
    ) -> Observation:
        return run_coroutine_sync(self._step_impl_async(action, timeout_s=timeout_s, **kwargs))

    async def _step_impl_async(
        self, action: Action, timeout_s: Optional[float] = None, **kwargs: Any
    ) -> Observation:
        if not isinstance(action, HarnessAction):
            raise TypeError(f"expected a HarnessAction, not {type(action).__name__}")
        return await self.run_turn(action, timeout_s=timeout_s)

    async def run_turn(
        self, action: HarnessAction, timeout_s: Optional[float] = None
    ) -> Observation:
        """One turn. Its events go to `turn_event_sink` as they happen, when one is set."""
        if not self._running:
            raise HarnessNotRunningError("no harness is running: call reset() first")
        limit = timeout_s or self.adapter.config.session_timeout_s
        sink = turn_event_sink.get()
        events: list[HarnessEvent] = []

        async def consume() -> None:
            async for event in self.adapter.send_message_streaming(action.message):
                events.append(event)
                self._trajectory.append(event)
                if sink is not None:
                    await sink(event)

        try:
            await asyncio.wait_for(consume(), limit)
            if not events or events[-1].type != HarnessEventType.TURN_COMPLETE:
                raise HarnessError(
                    f"harness {self.adapter.config.name!r} ended a turn without turn_complete"
                )
        except (asyncio.TimeoutError, HarnessTurnTimeoutError) as exc:
            message = str(exc) or f"the turn did not finish within {limit:g}s"
            return await self._failed_turn(events, TURN_TIMEOUT, message, sink)
        except Exception as exc:  # the harness died or broke its protocol: not the agent's fault
            alive = False
            with contextlib.suppress(Exception):
                alive = await self.adapter.is_alive()
            message = f"{type(exc).__name__}: {exc}" + ("" if alive else " (harness not running)")
            return await self._failed_turn(events, HARNESS_CRASHED, message, sink)
        last = events[-1].data
        self._state.step_count += 1
        observation = Observation(
            done=bool(last.get("done")),
            reward=0.0,
            metadata={
                "response": str(last.get("response", "")),
                "turn_events": events_to_metadata(events),
                "turn_number": self._state.step_count,
                "model_calls": self._drain_model_calls(),
            },
        )
        if self.rubric is not None:
            observation.reward = await self._apply_rubric_async(action, observation)
        return self._apply_transform(observation)

    async def _failed_turn(
        self,
        events: list[HarnessEvent],
        error_type: str,
        message: str,
        sink: Optional[EventSink],
    ) -> Observation:
        """End the episode: stop the harness, and report an infrastructure failure, unscored."""
        error = HarnessEvent(
            type=HarnessEventType.ERROR, data={"message": message, "recoverable": False}
        )
        events.append(error)
        self._trajectory.append(error)
        calls = self._drain_model_calls()
        if sink is not None:  # the client learns first; stopping may take the grace period
            with contextlib.suppress(Exception):
                await sink(error)
        with contextlib.suppress(Exception):
            await self._stop_harness()
        # The server must not score it either (a rubric would turn it into a number).
        self._rubric_scored = self.rubric is not None
        return Observation(
            done=True,
            reward=None,
            metadata={
                "error": message,
                "error_type": error_type,
                "category": "infrastructure",
                # What happened before the failure is kept, with the error last.
                "turn_events": events_to_metadata(events),
                "model_calls": calls,
            },
        )

    # -- lifetime ------------------------------------------------------------------------

    def close(self) -> None:
        try:
            run_coroutine_sync(self._stop_harness())
        finally:
            capture, self._capture = self._capture, None
            if capture is not None:
                capture.stop()
            super().close()
