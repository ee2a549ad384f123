"""Conversion between wire dicts and typed models."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from ..errors import EnvironmentExecutionError
from ..protocol import EncodedReply, encode_observation, observation_data
from .types import Action, Observation

_PYDANTIC_VALIDATE = BaseModel.model_validate.__func__  # type: ignore[attr-defined]
#: Action classes' validate functions (`validate_model`); a server has a handful of classes.
_VALIDATORS: dict[type[BaseModel], Callable[[Any], Any]] = {}
_VALIDATORS_KEPT = 256
_MCP_ACTION_TYPES = {
    "list_tools": "ListToolsAction",
    "call_tool": "CallToolAction",
    "execute_code": "ExecuteCodeAction",
}


def serialize_observation(observation: Observation) -> dict[str, Any]:
    """The OpenEnv payload `{"observation", "reward", "done"}` plus the observation's metadata
    (`protocol.observation_data`, where the shape is defined)."""
    return observation_data(observation)


def encode_observation_reply(observation: Observation, binary: bool = False) -> EncodedReply:
    """The reply to a reset or step, encoded by `protocol.encode_observation` (the one encoder
    of observation replies, for every transport).

    An observation that cannot be encoded is the environment's bug: it is reported as
    EXECUTION_ERROR (category environment), not as a server failure.
    """
    try:
        return encode_observation(observation, binary)
    except TypeError as exc:
        raise EnvironmentExecutionError(
            f"{type(observation).__name__} cannot be encoded as JSON: {exc}",
            exception=type(exc).__name__,
        ) from exc


def deserialize_action(data: dict[str, Any], action_cls: type[Action]) -> Action:
    """Validate a wire action; MCP actions are recognised by their `type` discriminator."""
    action_type = data.get("type") if isinstance(data, dict) else None
    if action_type in _MCP_ACTION_TYPES:
        by_type = _mcp_action_classes()
        if action_cls is Action or issubclass(action_cls, tuple(by_type.values())):
            return validate_model(by_type[action_type], data)
    return validate_model(action_cls, data)


def validate_model(cls: type[BaseModel], data: Any) -> Any:
    """`cls.model_validate(data)`. For a class that keeps pydantic's own `model_validate`, its
    validator is called directly: `model_validate` passes it half a dozen default keyword
    arguments, which cost as much again as validating a small action."""
    validate = _VALIDATORS.get(cls)
    if validate is None:
        validate = cls.model_validate
        if cls.__pydantic_complete__ and (
            getattr(validate, "__func__", None) is _PYDANTIC_VALIDATE
        ):
            validate = cls.__pydantic_validator__.validate_python
        if len(_VALIDATORS) < _VALIDATORS_KEPT:
            _VALIDATORS[cls] = validate
    return validate(data)


@functools.cache
def _mcp_action_classes() -> dict[str, type[Action]]:
    """The MCP action models by wire type; imported at the first MCP action, not with this
    module (mcp_types is not needed by plain environments)."""
    from . import mcp_types

    return {kind: getattr(mcp_types, name) for kind, name in _MCP_ACTION_TYPES.items()}


def _parse_json_text(value: Any) -> Any:
    """A JSON document sent as a string (web forms send one), parsed; anything else as is.

    Text that is not JSON stays text, so validation reports it rather than it turning into an
    empty value.
    """
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def deserialize_action_with_preprocessing(data: dict[str, Any], action_cls: type[Action]) -> Action:
    """`deserialize_action` for values typed into a form: a `call_tool`'s `arguments` given as
    JSON text, `tokens` as JSON text or a list (a tensor when torch is installed), and
    `action_id` as digits are converted before validation."""
    processed = dict(data)
    if processed.get("type") == "call_tool" and "arguments" in processed:
        processed["arguments"] = _parse_json_text(processed["arguments"])
    if "tokens" in processed:
        tokens = _parse_json_text(processed["tokens"])
        if isinstance(tokens, list):
            try:
                import torch  # type: ignore[import-not-found, unused-ignore]
            except ImportError:
                pass
            else:
                tokens = torch.tensor(tokens, dtype=torch.long)
        processed["tokens"] = tokens
    action_id = processed.get("action_id")
    if isinstance(action_id, str):
        try:
            processed["action_id"] = int(action_id)
        except ValueError:
            pass
    return deserialize_action(processed, action_cls)
