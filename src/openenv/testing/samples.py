"""Sample actions generated from JSON Schemas, and deliberately invalid variants of them.

Environments whose legal actions a schema cannot tell (moves of a game, words of a puzzle)
declare them as the action model's JSON Schema `examples`, a legal line of play from
`reset(seed=0)`; the checker plays those instead of generating any (see `declared_samples` and
docs/testing.md). Otherwise they are generated (deterministic: sample `i` is always the same):

- only **required** fields are filled (optional fields keep their defaults, so flags such as
  `fail: bool = False` are never switched on); `metadata` is never filled;
- a field's `const` wins, then its `examples` (cycled: give a field `Field(examples=[...])` to
  steer the checker), then its `enum` / `Literal` choices (cycled);
- integers cycle through 1, 2, 3, 0, 4 and floats through 0.5, 1.0, 1.5, 0.0, 2.0, moved
  inside `minimum` / `maximum` / `exclusiveMinimum` / `exclusiveMaximum` / `multipleOf`;
- booleans alternate True / False;
- strings are `sample-<i>` (or fit `format`: email, uri, uuid, date, date-time), padded or cut
  to `minLength` / `maxLength`; a `pattern` is honoured only when a simple candidate matches;
- arrays get `minItems` items (at least none), tuples one value per `prefixItems` entry;
  objects get their required properties; `anyOf` / `oneOf` use the first non-null branch;
  `$ref` is resolved against the schema's `$defs`;
- a field whose schema allows anything gets a string.

MCP tool environments get `call_tool` actions instead, one per tool in turn, whose arguments are
generated from each tool's input schema the same way.

When generation cannot satisfy the schema, the action fails validation and the checker says so:
pass `sample_actions=` explicitly then.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

_INTS = (1, 2, 3, 0, 4)
_FLOATS = (0.5, 1.0, 1.5, 0.0, 2.0)
_SKIP_FIELDS = frozenset({"metadata"})
#: Name of the field the unknown-field probe adds.
UNKNOWN_FIELD = "openenv_check_unknown_field"
_NOT_SUPPORTED = object()


class SampleGenerationError(ValueError):
    """A schema the generator cannot produce a value for."""


def _resolve(schema: Any, defs: dict[str, Any], depth: int = 0) -> dict[str, Any]:
    if not isinstance(schema, dict):
        return {}
    if depth > 20:
        raise SampleGenerationError("schema references nest too deeply")
    ref = schema.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[-1]
        target = defs.get(name)
        if target is None:
            raise SampleGenerationError(f"unresolvable $ref {ref!r}")
        return {
            **_resolve(target, defs, depth + 1),
            **{k: v for k, v in schema.items() if k != "$ref"},
        }
    all_of = schema.get("allOf")
    if isinstance(all_of, list) and all_of:
        merged: dict[str, Any] = {}
        for part in all_of:
            merged.update(_resolve(part, defs, depth + 1))
        merged.update({k: v for k, v in schema.items() if k != "allOf"})
        return merged
    return schema


def _branches(schema: dict[str, Any]) -> list[Any] | None:
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            return options
    return None


def _is_null(schema: Any) -> bool:
    return isinstance(schema, dict) and schema.get("type") == "null"


def _types(schema: dict[str, Any]) -> list[str]:
    kind = schema.get("type")
    if isinstance(kind, str):
        return [kind]
    if isinstance(kind, list):
        return [k for k in kind if isinstance(k, str)]
    return []


def _number(schema: dict[str, Any], index: int, integer: bool) -> int | float:
    value: float = (_INTS if integer else _FLOATS)[index % 5]
    step = 1 if integer else 0.5
    lo = schema.get("minimum")
    hi = schema.get("maximum")
    if schema.get("exclusiveMinimum") is not None:
        lo = schema["exclusiveMinimum"] + step
    if schema.get("exclusiveMaximum") is not None:
        hi = schema["exclusiveMaximum"] - step
    if lo is not None and value < lo:
        value = lo + (index % 5) * step
    if hi is not None and value > hi:
        value = hi - (index % 5) * step
        if lo is not None and value < lo:
            value = lo
    multiple = schema.get("multipleOf")
    if multiple:
        value = round(value / multiple) * multiple
        if lo is not None and value < lo:
            value += multiple
        if hi is not None and value > hi:
            value -= multiple
    return int(value) if integer else float(value)


_FORMATS = {
    "email": lambda i: f"user{i}@example.com",
    "uri": lambda i: f"https://example.com/{i}",
    "url": lambda i: f"https://example.com/{i}",
    "uuid": lambda i: str(uuid.UUID(int=i + 1)),
    "date": lambda i: f"2024-01-{(i % 28) + 1:02d}",
    "date-time": lambda i: f"2024-01-{(i % 28) + 1:02d}T00:00:00Z",
    "time": lambda i: f"00:00:{i % 60:02d}",
    "ipv4": lambda i: f"127.0.0.{(i % 250) + 1}",
    "hostname": lambda i: f"host{i}.example.com",
}


def _string(schema: dict[str, Any], index: int) -> str:
    fmt = schema.get("format")
    text = _FORMATS[fmt](index) if fmt in _FORMATS else f"sample-{index}"
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        try:
            regex = re.compile(pattern)
        except re.error:
            regex = None
        if regex is not None and not regex.search(text):
            for candidate in (f"sample{index}", str(index), "a", "A", "sample", "x" * 8, "0"):
                if regex.search(candidate):
                    text = candidate
                    break
    min_len = schema.get("minLength") or 0
    max_len = schema.get("maxLength")
    if len(text) < min_len:
        text = text + "x" * (min_len - len(text))
    if max_len is not None and len(text) > max_len:
        text = text[:max_len]
    return text


def sample_value(
    schema: Any, index: int = 0, defs: dict[str, Any] | None = None, _depth: int = 0
) -> Any:
    """A value valid for `schema` (best effort), varying with `index`."""
    if _depth > 12:
        raise SampleGenerationError("schema nests too deeply")
    defs = defs if defs is not None else {}
    if isinstance(schema, dict) and "$defs" in schema:
        defs = {**defs, **schema["$defs"]}
    schema = _resolve(schema, defs)
    if "const" in schema:
        return schema["const"]
    examples = schema.get("examples")
    if isinstance(examples, list) and examples:
        return examples[index % len(examples)]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[index % len(enum)]
    options = _branches(schema)
    if options is not None:
        non_null = [o for o in options if not _is_null(_resolve(o, defs))]
        return sample_value((non_null or options)[0], index, defs, _depth + 1)
    types = [t for t in _types(schema) if t != "null"] or _types(schema)
    kind = types[0] if types else None
    if kind is None:
        if "properties" in schema:
            kind = "object"
        elif "items" in schema or "prefixItems" in schema:
            kind = "array"
        else:
            return f"sample-{index}"  # anything goes
    if kind == "integer":
        return _number(schema, index, integer=True)
    if kind == "number":
        return _number(schema, index, integer=False)
    if kind == "boolean":
        return index % 2 == 0
    if kind == "string":
        return _string(schema, index)
    if kind == "null":
        return None
    if kind == "array":
        prefix = schema.get("prefixItems")
        if isinstance(prefix, list):
            return [sample_value(p, index + k, defs, _depth + 1) for k, p in enumerate(prefix)]
        count = int(schema.get("minItems") or 0)
        items = schema.get("items", {})
        return [sample_value(items, index + k, defs, _depth + 1) for k in range(count)]
    if kind == "object":
        return sample_object(schema, index, defs, _depth + 1)
    raise SampleGenerationError(f"unsupported schema type {kind!r}")


def sample_object(
    schema: dict[str, Any], index: int = 0, defs: dict[str, Any] | None = None, _depth: int = 0
) -> dict[str, Any]:
    """An object with every required property of `schema` filled in."""
    defs = defs if defs is not None else {}
    if "$defs" in schema:
        defs = {**defs, **schema["$defs"]}
    schema = _resolve(schema, defs)
    properties = schema.get("properties") or {}
    out: dict[str, Any] = {}
    for name in schema.get("required") or []:
        if name in _SKIP_FIELDS:
            continue
        try:
            out[name] = sample_value(properties.get(name, {}), index, defs, _depth)
        except SampleGenerationError as exc:
            raise SampleGenerationError(f"field {name!r}: {exc}") from None
    return out


def declared_samples(action_schema: dict[str, Any]) -> list[dict[str, Any]]:
    """The sample actions an action schema declares: its top-level `examples` that are objects.

    Declare them on the model, so that `/schema` publishes them and every driver sees them::

        class MoveAction(Action):
            model_config = ConfigDict(json_schema_extra={"examples": [{"move": "e2e4"}]})
    """
    examples = action_schema.get("examples")
    return [e for e in examples if isinstance(e, dict)] if isinstance(examples, list) else []


def sample_actions_from_schema(action_schema: dict[str, Any], count: int) -> list[dict[str, Any]]:
    """`count` action payloads (wire dicts) for an action JSON Schema."""
    return [sample_object(action_schema, i) for i in range(count)]


def tool_call_samples(tools: list[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    """`call_tool` actions cycling through `tools` (dicts with `name` and an input schema)."""
    if not tools:
        return [{"type": "list_tools"} for _ in range(count)]
    out = []
    for i in range(count):
        tool = tools[i % len(tools)]
        schema = tool.get("inputSchema") or tool.get("input_schema") or {}
        out.append(
            {
                "type": "call_tool",
                "tool_name": tool["name"],
                "arguments": sample_object(schema, i // len(tools)),
            }
        )
    return out


# -- invalid actions -------------------------------------------------------------------------


def _allowed_types(schema: dict[str, Any], defs: dict[str, Any]) -> set[str] | None:
    """JSON types a field accepts, or None when it accepts anything (or we cannot tell)."""
    schema = _resolve(schema, defs)
    if "const" in schema or "enum" in schema:
        return {"choice"}
    options = _branches(schema)
    if options is not None:
        allowed: set[str] = set()
        for option in options:
            sub = _allowed_types(option, defs)
            if sub is None:
                return None
            allowed |= sub
        return allowed
    types = set(_types(schema))
    if not types:
        if "properties" in schema:
            return {"object"}
        return None
    return types


def wrong_value(schema: dict[str, Any], defs: dict[str, Any] | None = None) -> Any:
    """A value of the wrong JSON type for `schema`, or `_NOT_SUPPORTED` for free-form fields."""
    allowed = _allowed_types(schema, defs or {})
    if allowed is None:
        return _NOT_SUPPORTED
    if allowed == {"choice"}:
        return "openenv-check-not-a-valid-choice"
    if "choice" in allowed:
        allowed = allowed - {"choice"}
    if "object" not in allowed:
        return {"openenv_check": "wrong type"}
    if "string" not in allowed:
        return "openenv-check-wrong-type"
    if "array" not in allowed:
        return [{"openenv_check": "wrong type"}]
    return _NOT_SUPPORTED


def wrong_type_probe(
    action_schema: dict[str, Any], base: dict[str, Any]
) -> tuple[str, Any, dict[str, Any]] | None:
    """`(field, bad value, payload)`: `base` with one typed field set to a wrong-typed value.

    Required fields are tried first. None when no field has a type to violate.
    """
    defs = action_schema.get("$defs") or {}
    properties = action_schema.get("properties") or {}
    required = list(action_schema.get("required") or [])
    order = required + [name for name in properties if name not in required]
    for name in order:
        if name in _SKIP_FIELDS or name == "type":
            continue
        bad = wrong_value(properties.get(name, {}), defs)
        if bad is _NOT_SUPPORTED:
            continue
        return name, bad, {**base, name: bad}
    # The MCP discriminator `type` only as a last resort: it selects the model itself.
    if "type" in properties:
        bad = wrong_value(properties["type"], defs)
        if bad is not _NOT_SUPPORTED:
            return "type", bad, {**base, "type": bad}
    return None


def missing_field_probe(
    action_schema: dict[str, Any], base: dict[str, Any]
) -> tuple[str, dict[str, Any]] | None:
    """`(field, payload)`: `base` without its first required field; None if none is required."""
    for name in action_schema.get("required") or []:
        if name in _SKIP_FIELDS:
            continue
        return name, {k: v for k, v in base.items() if k != name}
    return None
