"""verl: a served environment's tools as verl tools (`verl.tools.base_tool.BaseTool`).

verl's multi-turn rollout (`ToolAgentLoop`) parses the model's tool calls and, for each one,
calls `create(create_kwargs=...)`, `execute(instance_id, parameters, agent_data=...)` and
`release(instance_id)` on the tool of that name; `execute` answers `(ToolResponse, step
reward, metrics)`. `OpenEnvTool` is one environment tool (an MCP tool, or `act` for any other
environment): all the environment tools of one trajectory share one episode (one WebSocket
session), keyed by the trajectory's `agent_data.request_id`, so a tool call is one
environment step and its reward is the environment's.

verl's loop turns any exception a tool raises into a text reply with tool reward 0.0. So an
environment failure, besides raising `EnvironmentInfrastructureError`, is written to the
trajectory's `agent_data.extra_fields["openenv_infrastructure_error"]`: a reward function
must check it (`raise_if_infrastructure_failed`) and refuse the trajectory rather than score it.

Tool config (verl's `tool_config_path` yaml):

    tools:
      - class_name: openenv.integrations.verl.OpenEnvTool
        config: {type: native, base_url: "http://127.0.0.1:8000", tool_name: act}

`tool_name` may be left out when the environment has one tool; `tool_schema` is built from the
environment's. Per-row `create_kwargs` may give `seed` and `task` for the episode. An episode
is closed when the environment says done, or by `close_trajectory(request_id)`.

`verl` is imported only when `OpenEnvTool` is first used.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections import OrderedDict
from typing import Any
from uuid import uuid4

from openenv.core.env_server.mcp_types import Tool

from ._episodes import EnvironmentInfrastructureError, ServedEnv, TextEpisode

__all__ = [
    "INFRA_ERROR_FIELD",
    "EnvironmentInfrastructureError",
    "ServedEnv",
    "close_trajectory",
    "raise_if_infrastructure_failed",
    "tool_schema_dict",
    "verl_tool_class",
]

#: The `agent_data.extra_fields` key that marks a trajectory the environment failed.
INFRA_ERROR_FIELD = "openenv_infrastructure_error"

_lock = threading.Lock()
#: (base_url, trajectory) -> its episode; shared by every OpenEnvTool on that server.
_episodes: dict[tuple[str, str], TextEpisode] = {}
_served: dict[str, ServedEnv] = {}
#: Finished trajectories' environment reward, for `calc_reward` after the episode closed.
_finished: OrderedDict[tuple[str, str], float] = OrderedDict()
_FINISHED_KEPT = 10_000


def _served_env(config: dict[str, Any]) -> ServedEnv:
    base_url = str(config.get("base_url") or "").rstrip("/")
    if not base_url:
        raise ValueError("OpenEnvTool needs config['base_url']")
    with _lock:
        if base_url not in _served:
            _served[base_url] = ServedEnv(
                base_url,
                invalid_action_reward=float(config.get("invalid_action_reward", 0.0)),
            )
        return _served[base_url]


def tool_schema_dict(tool: Tool) -> dict[str, Any]:
    """An environment tool in verl's OpenAI function schema (each property needs a `type`)."""
    schema = tool.input_schema or {}
    properties = {}
    for name, spec in (schema.get("properties") or {}).items():
        spec = spec or {}
        prop: dict[str, Any] = {"type": spec.get("type") or "string"}
        if spec.get("description"):
            prop["description"] = spec["description"]
        if isinstance(spec.get("enum"), list):
            prop["enum"] = spec["enum"]
        properties[name] = prop
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description or tool.name,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": [r for r in schema.get("required", []) if r in properties],
            },
        },
    }


def close_trajectory(request_id: str, base_url: str | None = None) -> None:
    """Close the trajectory's episode (on every server, or the one at `base_url`)."""
    with _lock:
        keys = [
            key
            for key in _episodes
            if key[1] == request_id and (base_url is None or key[0] == base_url.rstrip("/"))
        ]
        episodes = [_episodes.pop(key) for key in keys]
        for key, episode in zip(keys, episodes, strict=True):
            _finished[key] = episode.total_reward
            while len(_finished) > _FINISHED_KEPT:
                _finished.popitem(last=False)
    for episode in episodes:
        episode.close()


def raise_if_infrastructure_failed(extra_fields: dict[str, Any]) -> None:
    """For a reward function: refuse a trajectory whose environment failed (never score it)."""
    message = (extra_fields or {}).get(INFRA_ERROR_FIELD)
    if message:
        raise EnvironmentInfrastructureError(str(message))


@functools.cache
def verl_tool_class() -> type:
    """The `BaseTool` subclass, built on first use so `verl` is imported lazily."""
    from verl.tools.base_tool import BaseTool
    from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

    class OpenEnvTool(BaseTool):
        """One environment tool; see the module doc."""

        def __init__(self, config: dict[str, Any], tool_schema: Any = None) -> None:
            self.served = _served_env(config)
            if tool_schema is None:
                _, tools = self.served.describe()
                wanted = config.get("tool_name")
                if wanted is None and len(tools) != 1:
                    names = ", ".join(t.name for t in tools)
                    raise ValueError(f"the environment has several tools ({names}): set tool_name")
                matches = [t for t in tools if wanted is None or t.name == wanted]
                if not matches:
                    raise ValueError(f"the environment has no tool {wanted!r}")
                tool_schema = OpenAIFunctionToolSchema.model_validate(tool_schema_dict(matches[0]))
            super().__init__(config, tool_schema)
            self._pending: dict[str, dict[str, Any]] = {}

        async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, Any]:
            instance_id = instance_id or str(uuid4())
            self._pending[instance_id] = dict(kwargs.get("create_kwargs") or {})
            return instance_id, ToolResponse()

        def _episode(self, trajectory: str, create_kwargs: dict[str, Any]) -> TextEpisode:
            key = (self.served.base_url, trajectory)
            with _lock:
                episode = _episodes.get(key)
            if episode is None:
                seed = create_kwargs.get("seed")
                episode = self.served.episode(
                    task=create_kwargs.get("task"), seed=None if seed is None else int(seed)
                )
                with _lock:
                    _episodes[key] = episode
            return episode

        def _step(
            self, trajectory: str, create_kwargs: dict[str, Any], parameters: dict[str, Any]
        ) -> tuple[str, float, dict[str, Any], bool]:
            with _lock:
                finished = (self.served.base_url, trajectory) in _finished
            if finished:  # the model acts after the end: its mistake, not a new episode
                penalty = self.served.invalid_action_reward
                error = "the episode is over"
                return f"Invalid action: {error}", penalty, {"invalid_action": True}, True
            episode = self._episode(trajectory, create_kwargs)
            step = episode.call_tool(self.name, dict(parameters or {}))
            if step.done:
                close_trajectory(trajectory, self.served.base_url)
            metrics = {**step.metadata, "env_total_reward": episode.total_reward}
            return step.observation, step.reward, metrics, step.done

        async def execute(
            self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
        ) -> tuple[Any, float, dict]:
            agent_data = kwargs.get("agent_data")
            trajectory = str(getattr(agent_data, "request_id", None) or instance_id)
            create_kwargs = self._pending.get(instance_id, {})
            try:
                text, reward, metrics, done = await asyncio.to_thread(
                    self._step, trajectory, create_kwargs, parameters
                )
            except EnvironmentInfrastructureError as exc:
                close_trajectory(trajectory, self.served.base_url)
                extra = getattr(agent_data, "extra_fields", None)
                if isinstance(extra, dict):
                    extra[INFRA_ERROR_FIELD] = str(exc)
                raise
            metrics["env_done"] = done
            return ToolResponse(text=text), reward, metrics

        async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
            agent_data = kwargs.get("agent_data")
            trajectory = str(getattr(agent_data, "request_id", None) or instance_id)
            key = (self.served.base_url, trajectory)
            with _lock:
                episode = _episodes.get(key)
                if episode is not None:
                    return episode.total_reward
                if key in _finished:
                    return _finished[key]
            # No episode ran for it: there is no environment reward to report, not a 0.
            raise EnvironmentInfrastructureError(f"no episode for trajectory {trajectory!r}")

        async def release(self, instance_id: str, **kwargs: Any) -> None:
            self._pending.pop(instance_id, None)

    return OpenEnvTool


def __getattr__(name: str) -> Any:
    if name == "OpenEnvTool":
        return verl_tool_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
