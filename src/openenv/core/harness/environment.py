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

The reward of a turn is the environment's, never made up: give the environment itself
(`HarnessEnvironment(adapter, env=repo)`, instead of only its tools, `mcp=repo.mcp_server`) and
each tool call the agent makes is one step of that environment (`env.step(CallToolAction)`, so
its own step logic runs: step budgets, grading, its rubric); the turn's observation carries the
sum of the rewards those steps gave (`metadata["env_rewards"]` lists them) and is `done` when
one of them ended the episode. A turn in which the environment gave no reward (no tool call, or
tools alone were given) has `reward=None`, not 0 (OpenEnv scores every turn 0.0).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import uuid
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Optional

from fastmcp import FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.tools import Tool as MCPTool
from fastmcp.tools import ToolResult as MCPToolResult

from openenv import settings

from ..env_server.mcp_environment import MCPEnvironment
from ..env_server.mcp_types import RESERVED_TOOL_NAMES, CallToolAction, ListToolsAction
from ..env_server.rewards import reset_rubric, score_step
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
CAPTURE_KEY_VARIABLE = settings.CAPTURE_SESSION.name


class HarnessAction(Action):
    """One user message to the harness: one turn."""

    message: str


class _EnvironmentStepTool(MCPTool):
    """One of the wrapped environment's tools, bridged so that a call is one step of that
    environment (`HarnessEnvironment._step_wrapped`)."""

    harness: Any = None
    source: str = ""

    async def run(self, arguments: dict[str, Any]) -> MCPToolResult:
        harness: HarnessEnvironment = self.harness
        return await harness._step_wrapped(self.source, dict(arguments))


class HarnessEnvironment(MCPEnvironment):
    """Runs `adapter`'s harness for an episode; `mcp` holds the tools it may use, or `env` is
    the environment whose tools they are and whose rewards the turns carry.

    `reset` starts a fresh harness (stopping the previous one and its bridge); each
    `HarnessAction` is one turn, bounded by `config.session_timeout_s` (or the step's
    `timeout_s`); `ListToolsAction` / `CallToolAction` still reach the tools directly. The
    rubric scores every successful turn, and a trajectory rubric the whole episode when a turn
    ends it. `capture_model_calls` (on by default) puts the recording proxy in front of
    `config.model_url` (see the module docstring); turn it off only when the URL already is one.

    With `env` (an `MCPEnvironment`, e.g. a `RepoEnvironment` the caller has reset), the agent's
    tool calls are steps of it and a turn's reward is the sum of the rewards they gave (None when
    they gave none); `reset()` resets its rubric but not the environment itself (its reset
    options are its own: reset it before the harness, as its episode begins).
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
        env: Optional[MCPEnvironment] = None,
    ) -> None:
        if env is not None:
            if not isinstance(env, MCPEnvironment):
                raise TypeError(f"env must be an MCPEnvironment, not {type(env).__name__}")
            if mcp is not None and mcp is not env.mcp_server:
                raise ValueError("give env (its tools are bridged) or mcp, not both")
            mcp = env.mcp_server
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
        #: The wrapped environment, and the observations of its steps during the current turn.
        self._wrapped = env
        self._turn_steps: list[Observation] = []

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
    def wrapped_env(self) -> Optional[MCPEnvironment]:
        """The environment given as `env` (its tool calls are its steps), or None."""
        return self._wrapped

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
        self._turn_steps = []
        await self._reset_rubric_async()  # the server does it too; in process, this does
        if self._wrapped is not None:
            await reset_rubric(self._wrapped)  # its steps are scored by it, episode by episode
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
                server = (
                    await self._stepped_bridge_server(renames)
                    if self._wrapped is not None
                    else await build_bridge_server(self.mcp_server, renames)
                )
                bridge = HarnessMCPBridge(server)
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

    async def _stepped_bridge_server(self, renames: dict[str, str]) -> FastMCP:
        """The wrapped environment's tools (under their injected names, without the reserved
        ones), each call a step of the environment."""
        injected_for = {source: injected for injected, source in renames.items()}
        view = FastMCP(name=f"{self.mcp_server.name} (harness bridge)")
        for tool in await self.mcp_server.list_tools():
            if tool.name in RESERVED_TOOL_NAMES:
                continue
            view.add_tool(
                _EnvironmentStepTool(
                    name=injected_for.get(tool.name, tool.name),
                    description=tool.description,
                    parameters=tool.parameters,
                    output_schema=tool.output_schema,
                    annotations=tool.annotations,
                    harness=self,
                    source=tool.name,
                )
            )
        return view

    async def _step_wrapped(self, name: str, arguments: dict[str, Any]) -> MCPToolResult:
        """One tool call of the agent as a step of the wrapped environment, scored by its
        rubric as its server would; the observation is kept for the turn's reward."""
        env = self._wrapped
        assert env is not None
        action = CallToolAction(tool_name=name, arguments=arguments)
        try:
            # The turn's own limit bounds the call (not the tool-call default of a server step).
            observation = await env.step_async(
                action, timeout_s=self.adapter.config.session_timeout_s
            )
            await score_step(env, action, observation, asyncio.to_thread)
        except Exception as exc:  # refused (e.g. the episode is over) or broken: the agent sees it
            raise ToolError(f"{type(exc).__name__}: {exc}") from exc
        self._turn_steps.append(observation)
        error = getattr(observation, "error", None)
        if error is not None:
            raise ToolError(str(getattr(error, "message", error)))
        result = getattr(observation, "result", None)
        if result is None:
            return MCPToolResult(content="")
        return MCPToolResult(
            content=list(getattr(result, "content", None) or []),
            structured_content=getattr(result, "structured_content", None),
            meta=getattr(result, "meta", None),
        )

    def _turn_reward(self) -> tuple[Optional[float], bool, list[Optional[float]]]:
        """The wrapped environment's steps this turn: (sum of their rewards, None when none
        gave one; whether one ended the episode; each step's reward)."""
        steps, self._turn_steps = self._turn_steps, []
        rewards = [None if s.reward is None else float(s.reward) for s in steps]
        given = [r for r in rewards if r is not None]
        return (math.fsum(given) if given else None), any(s.done for s in steps), rewards

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
        if isinstance(action, CallToolAction) and self._wrapped is not None:
            # The wrapped environment's step, scored as the agent's calls are.
            observation = await self._wrapped.step_async(action, timeout_s=timeout_s, **kwargs)
            await score_step(self._wrapped, action, observation, asyncio.to_thread)
            return observation
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
        self._turn_steps = []

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
            self._turn_steps = []
            message = str(exc) or f"the turn did not finish within {limit:g}s"
            return await self._failed_turn(events, TURN_TIMEOUT, message, sink)
        except Exception as exc:  # the harness died or broke its protocol: not the agent's fault
            self._turn_steps = []
            alive = False
            with contextlib.suppress(Exception):
                alive = await self.adapter.is_alive()
            message = f"{type(exc).__name__}: {exc}" + ("" if alive else " (harness not running)")
            return await self._failed_turn(events, HARNESS_CRASHED, message, sink)
        last = events[-1].data
        self._state.step_count += 1
        reward, env_done, env_rewards = self._turn_reward()
        metadata: dict[str, Any] = {
            "response": str(last.get("response", "")),
            "turn_events": events_to_metadata(events),
            "turn_number": self._state.step_count,
            "model_calls": self._drain_model_calls(),
        }
        if self._wrapped is not None:
            metadata["env_rewards"] = env_rewards
        observation = Observation(
            # The environment's reward (None: it gave none this turn), never a made-up 0.
            done=bool(last.get("done")) or env_done,
            reward=reward,
            metadata=metadata,
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
