"""The environment side of an evaluated episode: a served environment seen as tools.

Both `EnvEvalHarness` (models behind `openenv.core.llm_client`) and the Inspect AI integration
(Inspect's own model) drive the model; this module is what they share: it opens a session on
the server, offers the environment's MCP tools (or, for an environment without MCP, one tool
whose arguments are the action), resets into a task, turns tool calls into steps and keeps the
rewards.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

import httpx

from openenv.core.errors import OpenEnvError
from openenv.core.generic_client import GenericEnvClient

__all__ = ["ACTION_TOOL", "EnvEpisode", "RewardMode", "episode_reward"]

#: The one tool offered for an environment without MCP tools: its arguments are the action.
ACTION_TOOL = "act"

#: How step rewards make the episode's reward: ``sum`` (the default: right for environments
#: that pay at the end, like terminal_env, and for per-step scores), ``last`` or ``mean``.
RewardMode = Literal["sum", "last", "mean"]

#: Observation fields that hold what the agent is asked to do, in order of preference.
_PROMPT_FIELDS = ("instruction", "prompt", "question", "task", "goal", "message")
_HIDDEN_FIELDS = {"metadata", "reward", "done"}


def episode_reward(step_rewards: list[float], mode: RewardMode) -> float:
    if not step_rewards:
        return 0.0
    if mode == "sum":
        return float(sum(step_rewards))
    if mode == "last":
        return float(step_rewards[-1])
    if mode == "mean":
        return float(sum(step_rewards) / len(step_rewards))
    raise ValueError(f"unknown reward mode {mode!r}; expected 'sum', 'last' or 'mean'")


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _refusal(exc: OpenEnvError) -> str:
    """What the environment refused and why, with the validation details when it gave them."""
    details = getattr(exc, "data", {}).get("errors")
    return f"error: {exc}" + (f"\n{json.dumps(details, default=str)}" if details else "")


def _visible(observation: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in observation.items() if k not in _HIDDEN_FIELDS}


def _action_tool(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The action's JSON schema as a tool, without the ``metadata`` every action carries."""
    schema = dict(schema)
    properties = dict(schema.get("properties") or {})
    properties.pop("metadata", None)
    schema["properties"] = properties
    if "required" in schema:
        schema["required"] = [name for name in schema["required"] if name != "metadata"]
    title = schema.get("title") or "action"
    description = schema.get("description") or ""
    return {
        "name": ACTION_TOOL,
        "description": (f"Take one step in the environment with a {title}. {description}".strip()),
        "inputSchema": schema,
    }


class EnvEpisode:
    """One session on a served environment; use ``async with`` and `start` for each task.

    Mistakes of the model (an unknown tool, an action the environment refuses) come back as
    tool results so the model can correct them; anything else (the server is gone, the
    sandbox failed) is raised for the harness to classify.
    """

    def __init__(
        self,
        base_url: str,
        *,
        reward_mode: RewardMode = "sum",
        client_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.reward_mode: RewardMode = reward_mode
        self._client = GenericEnvClient(base_url=self.base_url, **dict(client_kwargs or {}))
        self.tools: list[dict[str, Any]] = []
        self.is_mcp = False
        self.step_rewards: list[float] = []
        self.done = False
        self.last_observation: dict[str, Any] = {}
        self.last_metadata: dict[str, Any] = {}

    async def __aenter__(self) -> EnvEpisode:
        await self._client.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._client.__aexit__(*exc_info)

    @property
    def reward(self) -> float:
        return episode_reward(self.step_rewards, self.reward_mode)

    async def _discover_tools(self) -> None:
        reply = await self._client.mcp_request("tools/list")
        result = reply.get("result") if isinstance(reply, Mapping) else None
        if isinstance(result, Mapping) and result.get("tools"):
            self.is_mcp = True
            self.tools = [dict(tool) for tool in result["tools"]]
            return
        # The session's own headers: a server with an API key wants it on /schema too.
        headers = dict(self._client.headers)
        async with httpx.AsyncClient(timeout=30.0, headers=headers) as http:
            response = await http.get(f"{self.base_url}/schema")
            response.raise_for_status()
            self.tools = [_action_tool(response.json()["action"])]

    async def start(self, reset_kwargs: Mapping[str, Any]) -> str:
        """Reset into a task; the text that tells the model what to do."""
        if not self.tools:
            await self._discover_tools()
        self.step_rewards = []
        result = await self._client.reset(**dict(reset_kwargs))
        observation = dict(result.observation or {})
        self.done = bool(result.done)
        self.last_observation = observation
        self.last_metadata = dict(result.metadata or {})
        for name in _PROMPT_FIELDS:
            value = observation.get(name)
            if isinstance(value, str) and value.strip():
                return value
        return json.dumps(_visible(observation), default=str)

    async def call(self, name: str, arguments: Mapping[str, Any]) -> str:
        """Run one tool call as one step; the tool result for the model."""
        if self.done:
            return "error: the episode is over"
        known = {tool["name"] for tool in self.tools}
        if name not in known:
            return f"error: unknown tool {name!r}; the tools are {', '.join(sorted(known))}"
        if self.is_mcp:
            action: dict[str, Any] = {
                "type": "call_tool",
                "tool_name": name,
                "arguments": dict(arguments),
            }
        else:
            action = dict(arguments)
        try:
            result = await self._client.step(action)
        except OpenEnvError as exc:
            if exc.category != "client":
                raise
            return _refusal(exc)  # a refused action: the model's to fix
        observation = dict(result.observation or {})
        self.step_rewards.append(float(result.reward or 0.0))
        self.done = bool(result.done)
        self.last_observation = observation
        self.last_metadata = dict(result.metadata or {})
        if self.is_mcp:
            error = observation.get("error")
            if error:
                message = error.get("message") if isinstance(error, Mapping) else error
                return f"error: {_text(message)}"
            return _text(observation.get("result"))
        visible = _visible(observation)
        visible["reward"] = result.reward
        visible["done"] = result.done
        return json.dumps(visible, default=str)
