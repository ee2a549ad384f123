"""Text-in/text-out episodes on a served environment: what the verl, SkyRL and torchforge
adapters share, so each adapter is only the trainer's own interface.

An episode is one session of `openenv.core.harness.sessions.EnvSessionFactory` (the same
mapping `openenv collect` uses): an MCP environment exposes its tools, any other one tool,
`act`, whose arguments are the action's fields. A model's text becomes a tool call by
`parse_text_action` (or the adapter's `action_parser`).

Who is at fault decides what a failure becomes. An action the environment refused (bad
arguments, an unknown tool, text that is no action) is the model's: the step reports it and
scores `invalid_action_reward`. Anything else (the server is gone, the session was lost, a
reset failed) is the infrastructure's: `EnvironmentInfrastructureError` is raised, never a
reward of 0 the policy did not earn.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from openenv.core.env_server.mcp_types import Tool
from openenv.core.errors import OpenEnvError, exception_message
from openenv.core.harness.rollout import (
    ToolResult,
    as_text,
    is_model_error,
    tool_result_reward,
)
from openenv.core.harness.sessions import ACT_TOOL, EnvSessionFactory

__all__ = [
    "ActionParser",
    "EnvironmentInfrastructureError",
    "ServedEnv",
    "TextEpisode",
    "TextStep",
    "parse_text_action",
]

#: (text, tools, is MCP) -> (tool name, arguments); raise ValueError for text that is no action.
ActionParser = Callable[[str, list[Tool], bool], tuple[str, dict[str, Any]]]

_TAGGED = re.compile(r"<(tool_call|action)>\s*(.*?)\s*</\1>", re.DOTALL)
_FENCED = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.DOTALL)


class EnvironmentInfrastructureError(OpenEnvError):
    """The environment could not run the episode (unreachable, killed, session lost): the
    episode has no valid reward and must not be trained on as if it scored 0."""

    category = "infrastructure"


def _json_object(text: str) -> Any:
    """The JSON the model wrote: in <tool_call>/<action> tags, a ```json block, or the whole
    text; None when there is none."""
    candidates = [m.group(2) for m in _TAGGED.finditer(text)]
    candidates += [m.group(1) for m in _FENCED.finditer(text)]
    candidates.append(text.strip())
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except ValueError:
            continue
    return None


def _only_text_field(schema: dict[str, Any]) -> str | None:
    """The action's one string field (e.g. `answer`, `message`), where plain text can go."""
    properties = schema.get("properties") or {}
    text_fields = [
        name for name, spec in properties.items() if (spec or {}).get("type") == "string"
    ]
    required = [name for name in schema.get("required", []) if name in properties]
    if len(required) == 1 and required[0] in text_fields:
        return required[0]
    if not required and len(text_fields) == 1:
        return text_fields[0]
    return None


def parse_text_action(text: str, tools: list[Tool], mcp: bool) -> tuple[str, dict[str, Any]]:
    """The default text -> tool call: `{"name": ..., "arguments": {...}}` (tagged, fenced or
    bare) for any tool; for a non-MCP environment also a JSON object of the action's fields,
    or plain text when the action has a single string field."""
    payload = _json_object(text)
    if isinstance(payload, dict) and isinstance(payload.get("name"), str):
        arguments = payload.get("arguments", payload.get("parameters", {}))
        if isinstance(arguments, str):
            arguments = json.loads(arguments)
        if not isinstance(arguments, dict):
            raise ValueError("a tool call's arguments must be a JSON object")
        return payload["name"], arguments
    if not mcp:
        if isinstance(payload, dict):
            return ACT_TOOL, payload
        act = next((tool for tool in tools if tool.name == ACT_TOOL), None)
        field_name = _only_text_field(act.input_schema) if act is not None else None
        if field_name is not None:
            return ACT_TOOL, {field_name: text.strip()}
    names = ", ".join(tool.name for tool in tools)
    raise ValueError(
        f'no action in the reply: write a tool call {{"name": ..., "arguments": {{...}}}} '
        f"for one of: {names}"
    )


@dataclass
class TextStep:
    """One step as trainers want it: the text the model sees next, the environment's reward."""

    observation: str
    reward: float
    done: bool
    metadata: dict[str, Any] = field(default_factory=dict)


class TextEpisode:
    """One episode (one WebSocket session). Steps are text or tool calls; see the module doc
    for how failures are reported."""

    def __init__(
        self,
        served: ServedEnv,
        task: Any = None,
        seed: int | None = None,
        episode_id: str | None = None,
    ) -> None:
        self._served = served
        self.mcp, self.tools = served.describe()
        self.done = False
        self.total_reward = 0.0
        self.steps = 0
        try:
            self._session = served.factory.create(task, seed=seed, episode_id=episode_id)
        except Exception as exc:
            raise EnvironmentInfrastructureError(
                f"the environment could not start an episode: {exception_message(exc)}"
            ) from exc

    def initial_messages(self) -> list[dict[str, Any]]:
        """The task and the reset observation, as chat messages."""
        return [dict(m) for m in self._session.initial_messages()]

    def initial_text(self) -> str:
        return "\n\n".join(str(m.get("content") or "") for m in self.initial_messages())

    def step_text(self, text: str) -> TextStep:
        """The model's reply as one environment step."""
        try:
            name, arguments = self._served.action_parser(text, self.tools, self.mcp)
        except ValueError as exc:
            return self._invalid(str(exc))
        return self.call_tool(name, arguments)

    def call_tool(self, name: str, arguments: dict[str, Any]) -> TextStep:
        """One tool call (the `act` tool of a non-MCP environment is its step)."""
        if self.done:
            return self._invalid("the episode is over")
        try:
            result = self._session.call_tool(name, arguments)
        except Exception as exc:
            if is_model_error(exc):
                return self._invalid(exception_message(exc))
            raise EnvironmentInfrastructureError(
                f"the environment failed during the episode: {exception_message(exc)}"
            ) from exc
        return self._scored(result)

    def _scored(self, result: ToolResult) -> TextStep:
        reward = tool_result_reward(result)
        if reward is None:
            if result.done:
                raise EnvironmentInfrastructureError(
                    "the environment ended the episode without a reward"
                )
            reward = 0.0  # no reward yet: the environment scores at the end
        self.steps += 1
        self.done = bool(result.done)
        self.total_reward += float(reward)
        observation = f"Error: {result.error}" if result.error else as_text(result.data)
        metadata: dict[str, Any] = {"env_reward": reward}
        if result.error:
            metadata["tool_error"] = result.error
        return TextStep(observation, float(reward), self.done, metadata)

    def _invalid(self, message: str) -> TextStep:
        # The model's fault: it sees why, and the adapter's penalty is not an env reward.
        penalty = self._served.invalid_action_reward
        metadata = {"invalid_action": True, "error": message}
        return TextStep(f"Invalid action: {message}", penalty, self.done, metadata)

    def close(self) -> None:
        self._session.close()


def _close_client(client: Any) -> None:
    """Close an async client from sync code (its `.sync()` wrapper), or a sync one."""
    sync = getattr(client, "sync", None)
    (sync() if callable(sync) else client).close()


class ServedEnv:
    """A served environment that trainer adapters open episodes on: reached at `base_url`,
    or started with `ServedEnv.from_env(name)` (`AutoEnv.from_env`, stopped by `close()`)."""

    def __init__(
        self,
        base_url: str,
        *,
        action_parser: ActionParser | None = None,
        invalid_action_reward: float = 0.0,
        reset_kwargs: dict[str, Any] | None = None,
        system_prompt: str | None = None,
        message_timeout_s: float | None = None,
        owner: Any = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.action_parser: ActionParser = action_parser or parse_text_action
        self.invalid_action_reward = float(invalid_action_reward)
        self.factory = EnvSessionFactory(
            self.base_url,
            reset_kwargs=reset_kwargs,
            system_prompt=system_prompt,
            message_timeout_s=message_timeout_s,
        )
        self._owner = owner

    @classmethod
    def from_env(cls, name: str, *, start_kwargs: dict[str, Any] | None = None, **kwargs: Any):
        """Start environment `name` (`AutoEnv.from_env(name, **start_kwargs)`) and serve
        episodes from it until `close()`."""
        from openenv.auto import AutoEnv

        owner = AutoEnv.from_env(name, **(start_kwargs or {}))
        try:
            return cls(owner.base_url, owner=owner, **kwargs)
        except BaseException:
            _close_client(owner)
            raise

    def describe(self) -> tuple[bool, list[Tool]]:
        """(is MCP, tools), asked once per server."""
        try:
            return self.factory.describe()
        except Exception as exc:
            raise EnvironmentInfrastructureError(
                f"the environment at {self.base_url} did not answer: {exception_message(exc)}"
            ) from exc

    def episode(
        self, task: Any = None, seed: int | None = None, episode_id: str | None = None
    ) -> TextEpisode:
        return TextEpisode(self, task=task, seed=seed, episode_id=episode_id)

    def close(self) -> None:
        owner, self._owner = self._owner, None
        if owner is not None:
            _close_client(owner)

    def __enter__(self) -> ServedEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
