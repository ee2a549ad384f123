"""Black-box rollouts with a real agent: `AgentHarnessAdapter` runs an `AgenticHarnessAdapter`
(mini-swe-agent, Claude Code, ...) on a `ResourceSession`'s tools and returns the rollout.

This joins the two layers: the session's tools are served to the agent over MCP (through
`HarnessEnvironment` and its bridge, so the agent never reaches reset/step), every model call
goes through the recording proxy (so the rollout carries token ids and logprobs when the model
endpoint returns them), and every tool call is in the trace with the environment's reward. It
works with `build_harness_rollout_func` (give no `model_step_builder`) and `CollectRunner`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Optional

from fastmcp import FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.tools import Tool as MCPTool
from fastmcp.tools import ToolResult as MCPToolResult

from .adapter import AgenticHarnessAdapter, HarnessError
from .environment import HarnessAction, HarnessEnvironment
from .rollout import (
    HarnessAdapter,
    HarnessRolloutResult,
    HarnessRunLimits,
    Message,
    ModelStep,
    ResourceSession,
    RolloutEvent,
    ToolTraceEntry,
    as_text,
)
from .tools import resolve_tool_conflicts, tools_line

#: What the agent is told when it answered but the environment's episode is not over.
FOLLOW_UP = "The task is not finished yet: the environment has not ended the episode. Continue."


class _Budget:
    """The tool calls of one rollout: the trace, and the limit on their number."""

    def __init__(self, limit: Optional[int]) -> None:
        self.limit = limit
        self.trace: list[ToolTraceEntry] = []
        self.truncated = False
        self.failure: Optional[BaseException] = None


class _SessionTool(MCPTool):
    """One of the session's tools, as an MCP tool whose calls go to `session.call_tool`."""

    session: Any = None
    budget: Any = None

    async def run(self, arguments: dict[str, Any]) -> MCPToolResult:
        budget: _Budget = self.budget
        if budget.limit is not None and len(budget.trace) >= budget.limit:
            budget.truncated = True
            raise ToolError(f"tool call limit reached ({budget.limit} calls in this episode)")
        try:
            result = await asyncio.to_thread(self.session.call_tool, self.name, arguments)
        except (KeyError, ValueError, TypeError) as exc:  # the agent's mistake: it may retry
            raise ToolError(f"{type(exc).__name__}: {exc}") from exc
        except Exception as exc:  # the environment broke: the rollout fails, unscored
            budget.failure = exc
            raise ToolError(f"the environment failed: {exc}") from exc
        budget.trace.append(ToolTraceEntry(self.name, dict(arguments), result))
        if result.error is not None:
            raise ToolError(result.error)
        return MCPToolResult(content=as_text(result.data))


def _prompt(messages: list[Message]) -> str:
    """The session's opening messages as the agent's first message."""
    parts = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = "\n".join(str(block.get("text", "")) for block in content)
        if content:
            parts.append(str(content))
    return "\n\n".join(parts)


def _tools_as_seen(
    messages: list[Message], names: list[str], agent: AgenticHarnessAdapter
) -> list[Message]:
    """The opening with its sentence naming the session's tools (`tools_line`, as
    `sessions.observation_messages` writes it) naming them the way the agent sees them instead
    (renamed by `resolve_tool_conflicts`, as the environment serves them, and written as the
    agent calls them, `tools_sentence`)."""
    if not names:
        return messages
    resolved = resolve_tool_conflicts([{"name": name} for name in names], agent.BUILTIN_TOOL_NAMES)
    old = tools_line(names)
    new = agent.tools_sentence([tool["name"] for tool in resolved])
    if old == new:
        return messages
    rewritten: list[Message] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str) and old in content:
            message = {**message, "content": content.replace(old, new)}
        elif isinstance(content, list):
            blocks = [
                {**block, "text": block["text"].replace(old, new)}
                if isinstance(block, dict) and isinstance(block.get("text"), str)
                else block
                for block in content
            ]
            message = {**message, "content": blocks}
        rewritten.append(message)
    return rewritten


class AgentHarnessAdapter(HarnessAdapter):
    """Black-box only: `agent_factory()` makes a fresh agent adapter for each rollout.

    The agent gets the session's opening messages as its first turn (their sentence naming the
    session's tools names them as the agent sees them, `tools_sentence`); when it answers before the
    environment ends the episode it is told to continue (`follow_up`), up to `limits.max_turns`
    turns, `limits.max_total_tool_calls` tool calls and `limits.max_wall_time_s` seconds. A
    failure of the agent or the environment raises (`HarnessError`): the rollout is an
    infrastructure failure, never a reward.
    """

    def __init__(
        self,
        agent_factory: Callable[[], AgenticHarnessAdapter],
        *,
        follow_up: str = FOLLOW_UP,
        capture_model_calls: bool = True,
    ) -> None:
        self.agent_factory = agent_factory
        self.follow_up = follow_up
        self.capture_model_calls = capture_model_calls

    def run_white_box(
        self,
        model_step: ModelStep,
        session: ResourceSession,
        limits: Optional[HarnessRunLimits] = None,
    ) -> HarnessRolloutResult:
        raise NotImplementedError("the agent samples its own model: use run_black_box")

    def run_black_box(
        self, session: ResourceSession, limits: Optional[HarnessRunLimits] = None
    ) -> HarnessRolloutResult:
        limits = limits or HarnessRunLimits()
        budget = _Budget(limits.max_total_tool_calls)
        server = FastMCP(name="session-tools")
        specs = list(session.list_tools())
        for spec in specs:
            schema = getattr(spec, "input_schema", None) or {"type": "object", "properties": {}}
            server.add_tool(
                _SessionTool(
                    name=spec.name,
                    description=getattr(spec, "description", "") or spec.name,
                    parameters=schema,
                    session=session,
                    budget=budget,
                )
            )
        opening = session.initial_messages()
        messages: list[Message] = list(opening)
        events: list[RolloutEvent] = []
        agent = self.agent_factory()
        environment = HarnessEnvironment(
            agent, mcp=server, capture_model_calls=self.capture_model_calls
        )
        started = time.monotonic()
        stop_reason = "max_turns"
        turns = 0
        done = False
        try:
            environment.reset()
            opening = _tools_as_seen(opening, [spec.name for spec in specs], agent)
            messages = list(opening)
            message = _prompt(opening)
            while turns < limits.max_turns:
                remaining = None
                if limits.max_wall_time_s is not None:
                    remaining = limits.max_wall_time_s - (time.monotonic() - started)
                    if remaining <= 0:
                        stop_reason = "max_wall_time"
                        break
                observation = environment.step(HarnessAction(message=message), timeout_s=remaining)
                turns += 1
                events.extend(
                    RolloutEvent(type=e["type"], payload=e["data"])
                    for e in observation.metadata.get("turn_events", [])
                )
                if budget.failure is not None:
                    raise HarnessError(f"the environment failed: {budget.failure}")
                if observation.metadata.get("category") == "infrastructure":
                    raise HarnessError(str(observation.metadata.get("error")))
                response = str(observation.metadata.get("response", ""))
                if turns > 1:  # the first message is the opening, already in `messages`
                    messages.append({"role": "user", "content": message})
                messages.append({"role": "assistant", "content": response})
                done = any(entry.result.done for entry in budget.trace) or observation.done
                if done:
                    stop_reason = "done"
                    break
                if budget.truncated:
                    stop_reason = "max_total_tool_calls"
                    break
                message = self.follow_up
            model_calls = environment.model_calls
        finally:
            environment.close()
        return HarnessRolloutResult(
            messages=messages,
            tool_trace=budget.trace,
            events=events,
            done=done,
            metrics={
                "turns": turns,
                "tool_calls": len(budget.trace),
                "stop_reason": stop_reason,
                "truncated": stop_reason not in ("done",),
                "model_calls": model_calls,
                "wall_time_s": time.monotonic() - started,
            },
            **_tokens(model_calls),
        )


def _tokens(model_calls: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Token ids for a trainer: the first call's prompt, and every call's completion in order
    (an agent's later prompts repeat earlier completions; the per-call records keep them all)."""
    prompt: list[int] = next(
        (c["prompt_token_ids"] for c in model_calls if c.get("prompt_token_ids")), []
    )
    completion: list[int] = []
    logprobs: list[float] = []
    for call in model_calls:
        completion += call.get("completion_token_ids") or []
        logprobs += call.get("logprobs") or []
    return {"prompt_ids": list(prompt), "completion_ids": completion, "logprobs": logprobs}


__all__ = ["FOLLOW_UP", "AgentHarnessAdapter"]
