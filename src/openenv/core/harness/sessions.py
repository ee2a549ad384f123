"""Generic `ResourceSession`s for any running environment, so rollouts and `openenv collect`
work with every environment, not only ones that ship a session class.

- An MCP environment (its action is `CallToolAction`) exposes its own tools (`list_tools`).
- Any other environment exposes one tool, `act`, whose input schema is its action's JSON schema
  (from the server's `/schema`): the model writes the action's fields as the arguments.

The first user message is built from the reset observation: its text fields, legal actions and
the task prompt, plus the observation as JSON (which `scripted_model_step` reads).
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx

from openenv.core.client_types import StepResult
from openenv.core.env_server.mcp_types import Tool
from openenv.core.llm_client import LLMResponse, ToolCall

from .rollout import (
    Message,
    ModelStepResult,
    ResourceSessionFactory,
    StepEnvSessionAdapter,
    ToolResult,
    jsonable,
)
from .tools import tools_line

#: The one tool of a non-MCP environment (`step` is a reserved name).
ACT_TOOL = "act"
#: Marks the observation JSON in the first user message.
OBSERVATION_MARKER = "Observation (JSON):"
_IGNORED_FIELDS = ("metadata",)


def fetch_action_schema(
    base_url: str,
    timeout_s: float = 30.0,
    *,
    unix_socket: str | None = None,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The action's JSON schema, from the server's `/schema` (over its Unix socket when the
    provider serves it on one)."""
    transport = httpx.HTTPTransport(uds=unix_socket) if unix_socket else None
    with httpx.Client(transport=transport, timeout=timeout_s, headers=headers or {}) as http:
        response = http.get(base_url.rstrip("/") + "/schema")
    response.raise_for_status()
    schema = response.json().get("action")
    if not isinstance(schema, dict):
        raise ValueError(f"{base_url}/schema has no action schema")
    return schema


def is_mcp_schema(schema: dict[str, Any]) -> bool:
    properties = schema.get("properties") or {}
    return "tool_name" in properties and "arguments" in properties


def act_tool(schema: dict[str, Any]) -> Tool:
    """The `act` tool of a non-MCP environment: its action's fields, `metadata` left out."""
    input_schema = json.loads(json.dumps(schema))
    properties = input_schema.get("properties") or {}
    for name in _IGNORED_FIELDS:
        properties.pop(name, None)
    input_schema["properties"] = properties
    input_schema["required"] = [r for r in input_schema.get("required", []) if r in properties]
    input_schema.pop("title", None)
    input_schema.setdefault("type", "object")
    title = schema.get("title", "action")
    description = (schema.get("description") or "").strip()
    return Tool(
        name=ACT_TOOL,
        description=f"Take one step in the environment with a {title}. {description}".strip(),
        input_schema=input_schema,
    )


def observation_messages(
    observation: Any, task: Any = None, *, tools: list[Tool] | None = None
) -> list[Message]:
    """The first user message for a reset observation (and the task, when there is one)."""
    data = jsonable(observation)
    data = (
        {k: v for k, v in data.items() if k not in _IGNORED_FIELDS}
        if isinstance(data, dict)
        else data
    )
    parts: list[str] = []
    if isinstance(task, str) and task.strip():
        parts.append(task.strip())
    elif isinstance(task, dict) and isinstance(task.get("prompt"), str):
        parts.append(task["prompt"].strip())
    if isinstance(data, dict):
        for key, value in data.items():
            if isinstance(value, str) and value.strip():
                parts.append(f"{key}: {value.strip()}")
        if data.get("legal_actions") is not None:
            parts.append(f"legal actions: {json.dumps(data['legal_actions'])}")
    if tools:
        parts.append(tools_line(t.name for t in tools))
    parts.append(f"{OBSERVATION_MARKER}\n{json.dumps(data, sort_keys=True, default=str)}")
    return [{"role": "user", "content": "\n\n".join(parts)}]


def _step_tool_result(
    name: str, arguments: dict[str, Any], result: StepResult[Any], state: Any
) -> ToolResult:
    """The step's observation for the model, without `metadata` (graders keep answers
    there); the metadata stays in the result for the record."""
    observation = jsonable(result.observation)
    hidden: dict[str, Any] = {}
    if isinstance(observation, dict):
        hidden = observation.get("metadata") or {}
        observation = {k: v for k, v in observation.items() if k not in _IGNORED_FIELDS}
    return ToolResult(
        data={"observation": observation, "reward": result.reward, "done": result.done},
        done=bool(result.done),
        metadata={
            "reward": result.reward,
            "state": jsonable(state),
            "observation_metadata": hidden,
        },
    )


def _mcp_tool_result(
    name: str, arguments: dict[str, Any], result: StepResult[Any], state: Any
) -> ToolResult:
    observation = jsonable(result.observation)
    error = observation.get("error") if isinstance(observation, dict) else None
    body = observation.get("result") if isinstance(observation, dict) else observation
    if isinstance(body, dict) and "data" in body:
        data = body.get("data")
        if data is None:
            data = body.get("structured_content") or body.get("content")
    else:
        data = body
    if isinstance(error, dict):
        error = error.get("message") or json.dumps(error, default=str)
    return ToolResult(
        data=data,
        done=bool(result.done),
        metadata={"reward": result.reward, "state": jsonable(state)},
        error=None if error is None else str(error),
    )


class EnvSessionFactory(ResourceSessionFactory[StepEnvSessionAdapter]):
    """Sessions on a running environment: one WebSocket session (a client) per episode.

    `base_url` is the server; `client_factory(base_url)` makes a client (default:
    `GenericEnvClient`, plain dicts). `reset_kwargs` go to every reset (with the episode's seed
    and id); a task that is a dict adds its `seed`, `task_id` and `reset_kwargs`.
    `system_prompt` becomes the first message.
    """

    def __init__(
        self,
        base_url: str,
        *,
        client_factory: Callable[[str], Any] | None = None,
        reset_kwargs: dict[str, Any] | None = None,
        system_prompt: str | None = None,
        message_timeout_s: float | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._client_factory = client_factory or self._generic_client
        self.reset_kwargs = dict(reset_kwargs or {})
        self.system_prompt = system_prompt
        self._message_timeout_s = message_timeout_s
        self._lock = threading.Lock()
        self._tools: list[Tool] | None = None
        self._mcp: bool | None = None

    def _generic_client(self, base_url: str) -> Any:
        from openenv.core.generic_client import GenericEnvClient

        kwargs: dict[str, Any] = {}
        if self._message_timeout_s is not None:
            kwargs["message_timeout_s"] = self._message_timeout_s
        return GenericEnvClient(base_url=base_url, **kwargs)

    def describe(self) -> tuple[bool, list[Tool]]:
        """(is MCP, tools): asked once, then cached (every session of a server has the same)."""
        with self._lock:
            if self._tools is None:
                schema = self._action_schema()
                self._mcp = is_mcp_schema(schema)
                self._tools = self._list_mcp_tools() if self._mcp else [act_tool(schema)]
            assert self._mcp is not None
            return self._mcp, list(self._tools)

    def _action_schema(self) -> dict[str, Any]:
        return fetch_action_schema(self.base_url)

    def _list_mcp_tools(self) -> list[Tool]:
        client = self._client_factory(self.base_url)
        sync = client.sync() if callable(getattr(client, "sync", None)) else client
        try:
            result = sync.step({"type": "list_tools"})
        finally:
            sync.close()
        raw = jsonable(result.observation).get("tools") or []
        return [
            Tool(
                name=t["name"],
                description=t.get("description") or "",
                input_schema=t.get("input_schema") or t.get("inputSchema") or {},
            )
            for t in raw
        ]

    def create(
        self, task: Any, seed: int | None = None, episode_id: str | None = None
    ) -> StepEnvSessionAdapter:
        mcp, tools = self.describe()
        reset_kwargs = dict(self.reset_kwargs)
        if isinstance(task, dict):
            reset_kwargs.update({k: task[k] for k in ("seed", "task_id") if k in task})
            if isinstance(task.get("reset_kwargs"), dict):
                reset_kwargs.update(task["reset_kwargs"])
        system_prompt = self.system_prompt

        def initial(result: StepResult[Any], task: Any) -> list[Message]:
            messages = observation_messages(result.observation, task, tools=tools)
            if system_prompt:
                messages.insert(0, {"role": "system", "content": system_prompt})
            return messages

        def action(name: str, arguments: dict[str, Any]) -> Any:
            if mcp:
                return {"type": "call_tool", "tool_name": name, "arguments": arguments}
            return dict(arguments)

        return StepEnvSessionAdapter(
            self._client_factory(self.base_url),
            task=task,
            seed=seed,
            episode_id=episode_id,
            tool_specs=tools,
            action_builder=action,
            initial_messages_builder=initial,
            tool_result_builder=_mcp_tool_result if mcp else _step_tool_result,
            reset_kwargs=reset_kwargs,
        )


class FleetSessionFactory(EnvSessionFactory):
    """Sessions from an `EnvFleet`: each episode acquires one on the least-loaded live server
    and releases it when the session closes.

    `fleet` is an `EnvFleet` (used through its sync twin, `fleet.sync()`, which the caller
    closes) or a `SyncEnvFleet`. A call that fails because its server died raises the fleet's
    `ServerLostError` (infrastructure), so the rollout layer retries the episode on a live
    server instead of scoring it. `episodes_per_server` counts the sessions each server gave.
    """

    def __init__(
        self,
        fleet: Any,
        *,
        reset_kwargs: dict[str, Any] | None = None,
        system_prompt: str | None = None,
    ) -> None:
        # An `EnvFleet` gives its blocking twin with `.sync()`; a `SyncEnvFleet` is that twin.
        sync = getattr(fleet, "sync", None)
        self.fleet = sync() if callable(sync) else fleet
        super().__init__(
            "fleet://" + self.fleet.fleet.spec.target,
            client_factory=self._acquire,
            reset_kwargs=reset_kwargs,
            system_prompt=system_prompt,
        )
        self.episodes_per_server: Counter[str] = Counter()
        self._count_lock = threading.Lock()  # not `_lock`: describe() holds it to list tools

    def _action_schema(self) -> dict[str, Any]:
        self.fleet.start()
        server = self.fleet.servers()[0]
        return fetch_action_schema(
            server.base_url, unix_socket=server.unix_socket, headers=server.headers
        )

    def _acquire(self, base_url: str) -> _FleetSession:
        del base_url  # the fleet places the session
        session = _FleetSession(self.fleet, self.fleet.acquire())
        with self._count_lock:
            self.episodes_per_server[session.server_id] += 1
        return session


class _FleetSession:
    """A fleet session as a blocking client: failures on a dead server become the fleet's
    `ServerLostError`; `close()` gives the slot back."""

    def __init__(self, fleet: Any, client: Any) -> None:
        self._fleet = fleet
        self._client = client
        server = fleet.fleet.server_of(client.async_client)
        self.server_id: str = server.id if server is not None else "?"
        self._released = False

    def _call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except Exception as exc:
            lost = self._fleet.session_error(self._client, exc)
            if lost is exc:
                raise
            raise lost from exc

    def reset(self, **kwargs: Any) -> StepResult[Any]:
        return self._call(self._client.reset, **kwargs)

    def step(self, action: Any) -> StepResult[Any]:
        return self._call(self._client.step, action)

    def state(self) -> Any:
        return self._call(self._client.state)

    def close(self) -> None:
        if not self._released:
            self._released = True
            self._fleet.release(self._client)


# -- the scripted policy ----------------------------------------------------------------------


def sample_value(schema: dict[str, Any]) -> Any:
    """A plausible value for a JSON schema: its example, default, first enum value, or a
    type's simplest value."""
    for key in ("const", "default"):
        if key in schema:
            return schema[key]
    for key in ("examples", "enum"):
        if schema.get(key):
            return schema[key][0]
    for key in ("anyOf", "oneOf"):
        options = [o for o in schema.get(key) or [] if o.get("type") != "null"]
        if options:
            return sample_value(options[0])
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        return sample_arguments(schema)
    minimum = schema.get("minimum", 0)
    return {
        "string": "hello",
        "integer": int(minimum),
        "number": float(minimum),
        "boolean": False,
        "array": [],
    }.get(kind if isinstance(kind, str) else "", None)


def sample_arguments(schema: dict[str, Any]) -> dict[str, Any]:
    """Arguments for a tool: the schema's first example, else a value per required field."""
    examples = schema.get("examples")
    if examples and isinstance(examples[0], dict):
        return {k: v for k, v in examples[0].items() if k not in _IGNORED_FIELDS}
    properties = schema.get("properties") or {}
    return {name: sample_value(properties[name]) for name in schema.get("required", [])}


def latest_observation(messages: list[Message]) -> dict[str, Any] | None:
    """The newest observation in a transcript built by these sessions."""
    for message in reversed(messages):
        content = message.get("content")
        if not isinstance(content, str):
            continue
        if message.get("role") == "tool":
            try:
                data = json.loads(content)
            except ValueError:
                return None
            observation = data.get("observation") if isinstance(data, dict) else None
            return observation if isinstance(observation, dict) else None
        if message.get("role") == "user" and OBSERVATION_MARKER in content:
            try:
                data = json.loads(content.split(OBSERVATION_MARKER, 1)[1])
            except ValueError:
                return None
            return data if isinstance(data, dict) else None
    return None


def scripted_model_step(
    messages: list[Message], tools: list[Tool], sampling: dict[str, Any]
) -> ModelStepResult:
    """A policy without a model (smoke runs, pipelines): call the first tool with the first
    legal action when the observation lists legal actions and the tool takes one field, else
    with sample arguments from its schema (its first example, or simple values)."""
    del sampling
    if not tools:
        return ModelStepResult(response=LLMResponse(content="no tools to call"))
    tool = tools[0]
    arguments = sample_arguments(tool.input_schema)
    observation = latest_observation(messages) or {}
    legal = observation.get("legal_actions")
    required = tool.input_schema.get("required") or []
    if isinstance(legal, list) and legal and len(required) == 1:
        arguments = {required[0]: legal[0]}
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    call = ToolCall(id=f"call_{turn}", name=tool.name, args=arguments)
    return ModelStepResult(response=LLMResponse(content="", tool_calls=[call]))


__all__ = [
    "ACT_TOOL",
    "EnvSessionFactory",
    "FleetSessionFactory",
    "act_tool",
    "fetch_action_schema",
    "is_mcp_schema",
    "observation_messages",
    "sample_arguments",
    "scripted_model_step",
]
