"""Conversion between wire dicts and typed models."""

from __future__ import annotations

import base64
import dataclasses
from enum import Enum
from typing import Any

import orjson
from pydantic import BaseModel

from .types import Action, Observation

_OBS_ENVELOPE_FIELDS = {"reward", "done"}
_MCP_ACTION_TYPES = ("list_tools", "call_tool")


def _json_default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, Enum):
        return value.value
    if hasattr(value, "tolist"):  # numpy scalars/arrays not covered by OPT_SERIALIZE_NUMPY
        return value.tolist()
    if hasattr(value, "model_dump"):
        return value.model_dump()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_ORJSON_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def dumps(value: Any) -> bytes:
    """JSON-encode anything an environment may put in an observation (numpy, enums, models)."""
    return orjson.dumps(value, default=_json_default, option=_ORJSON_OPTIONS)


def loads(data: str | bytes) -> Any:
    return orjson.loads(data)


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
        from .errors import ExecutionError

        raise ExecutionError(
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
