"""Conversion between wire dicts and typed models."""

from __future__ import annotations

from typing import Any

from ..errors import EnvironmentExecutionError
from ..protocol import dumps
from .types import Action, Observation

_OBS_ENVELOPE_FIELDS = {"reward", "done"}
_MCP_ACTION_TYPES = ("list_tools", "call_tool")


def serialize_observation(observation: Observation) -> dict[str, Any]:
    """The OpenEnv payload `{"observation", "reward", "done"}` plus the observation's metadata.

    Metadata sits both inside the observation (where OpenEnv 0.10 clients read it) and at the
    top level. The reward keeps its own JSON type (bool, int or float) on every transport.
    """
    return {
        "observation": observation.model_dump(exclude=_OBS_ENVELOPE_FIELDS),
        "reward": observation.reward,
        "done": observation.done,
        "metadata": observation.metadata,
    }


def dumps_observation(value: Any, observation: Observation) -> bytes:
    """JSON-encode a reply carrying `observation`.

    An observation that cannot be encoded is the environment's bug: it is reported as
    EXECUTION_ERROR (category environment), not as a server failure.
    """
    try:
        return dumps(value)
    except TypeError as exc:
        raise EnvironmentExecutionError(
            f"{type(observation).__name__} cannot be encoded as JSON: {exc}",
            exception=type(exc).__name__,
        ) from exc


def deserialize_action(data: dict[str, Any], action_cls: type[Action]) -> Action:
    """Validate a wire action; MCP actions are recognised by their `type` discriminator."""
    action_type = data.get("type") if isinstance(data, dict) else None
    if action_type in _MCP_ACTION_TYPES:
        from .mcp_types import CallToolAction, ListToolsAction

        if action_cls is Action or issubclass(action_cls, (CallToolAction, ListToolsAction)):
            target = ListToolsAction if action_type == "list_tools" else CallToolAction
            return target.model_validate(data)
    return action_cls.model_validate(data)
