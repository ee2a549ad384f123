"""JSON helpers shared by the checkers: tolerant normalisation, diffs and schema validation."""

from __future__ import annotations

import math
from typing import Any

import orjson

from openenv.core.protocol import dumps, loads

_MAX_REPR = 80


def short(value: Any, limit: int = _MAX_REPR) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _placeholder(value: Any) -> Any:
    # Stable across runs (no memory addresses), so unserializable values do not look random.
    return f"<unserializable {type(value).__name__}>"


def normalize(value: Any) -> Any:
    """`value` as plain JSON data; values that cannot be serialized become a stable placeholder."""
    if hasattr(value, "model_dump"):
        try:
            value = value.model_dump()
        except Exception:
            return _placeholder(value)
    try:
        return loads(dumps(value))
    except (TypeError, orjson.JSONEncodeError):
        return loads(orjson.dumps(value, default=_placeholder, option=orjson.OPT_NON_STR_KEYS))


def first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """Where two JSON values first differ, as `path: a != b`; None when they are equal."""
    where = path or "(value)"
    if isinstance(a, dict) and isinstance(b, dict):
        for key in list(a) + [k for k in b if k not in a]:
            sub = f"{path}.{key}" if path else str(key)
            if key not in a:
                return f"{sub}: missing != {short(b[key])}"
            if key not in b:
                return f"{sub}: {short(a[key])} != missing"
            diff = first_difference(a[key], b[key], sub)
            if diff is not None:
                return diff
        return None
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            diff = first_difference(x, y, f"{path}[{i}]")
            if diff is not None:
                return diff
        if len(a) != len(b):
            return f"{where}: {len(a)} items != {len(b)} items"
        return None
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return None
    if a != b or type(a) is not type(b):
        return f"{where}: {short(a)} != {short(b)}"
    return None


def without(value: Any, *keys: str) -> Any:
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if k not in keys}
    return value


def unserializable_fields(model: Any) -> list[str]:
    """Names (and types) of a model's fields whose values JSON cannot encode."""
    out = []
    for name in type(model).model_fields:
        value: Any = getattr(model, name, None)
        try:
            dumps(value.model_dump() if hasattr(value, "model_dump") else value)
        except (TypeError, orjson.JSONEncodeError) as exc:
            out.append(f"{name!r} ({type(value).__name__}: {exc})")
    return out


# -- JSON Schema --------------------------------------------------------------------------


def _jsonschema() -> Any:
    try:
        import jsonschema  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover - jsonschema ships with the mcp SDK
        return None
    return jsonschema


def schema_validator_name() -> str:
    return "jsonschema" if _jsonschema() is not None else "a structural check"


def check_schema(schema: Any) -> list[str]:
    """Problems with `schema` as a JSON Schema document (empty when it is valid)."""
    if not isinstance(schema, dict):
        return [f"expected a JSON object, got {type(schema).__name__}"]
    js = _jsonschema()
    if js is None:
        return []
    cls = js.validators.validator_for(schema, default=js.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except js.exceptions.SchemaError as exc:
        return [exc.message]
    return []


def validate(instance: Any, schema: dict[str, Any], limit: int = 5) -> list[str]:
    """Why `instance` does not match `schema` (empty when it does); jsonschema if installed."""
    js = _jsonschema()
    if js is None:
        return _structural(instance, schema, schema.get("$defs") or {}, "")[:limit]
    cls = js.validators.validator_for(schema, default=js.Draft202012Validator)
    errors = sorted(cls(schema).iter_errors(instance), key=lambda e: list(e.absolute_path))
    out = []
    for err in errors[:limit]:
        where = ".".join(str(p) for p in err.absolute_path) or "(root)"
        out.append(f"{where}: {err.message}")
    return out


_JSON_TYPES = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
    "null": type(None),
}


def _type_ok(value: Any, kind: str) -> bool:
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    expected = _JSON_TYPES.get(kind)
    return expected is None or isinstance(value, expected)


def _structural(value: Any, schema: Any, defs: dict[str, Any], path: str) -> list[str]:
    """A small subset of JSON Schema: $ref, anyOf/oneOf, type, const, enum, required,
    properties, additionalProperties false, items."""
    if not isinstance(schema, dict):
        return []
    where = path or "(root)"
    ref = schema.get("$ref")
    if isinstance(ref, str):
        return _structural(value, defs.get(ref.rsplit("/", 1)[-1], {}), defs, path)
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            if any(not _structural(value, o, defs, path) for o in options):
                break
            return [f"{where}: {short(value)} matches none of the allowed schemas"]
    if "const" in schema and value != schema["const"]:
        return [f"{where}: {short(value)} is not {short(schema['const'])}"]
    if isinstance(schema.get("enum"), list) and value not in schema["enum"]:
        return [f"{where}: {short(value)} is not one of {short(schema['enum'])}"]
    kind = schema.get("type")
    kinds = [kind] if isinstance(kind, str) else kind if isinstance(kind, list) else []
    if kinds and not any(_type_ok(value, k) for k in kinds):
        return [f"{where}: {short(value)} is not of type {' or '.join(kinds)}"]
    errors: list[str] = []
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for name in schema.get("required") or []:
            if name not in value:
                errors.append(f"{where}: {name!r} is a required property")
        if schema.get("additionalProperties") is False:
            for name in value:
                if name not in props:
                    errors.append(f"{where}: additional property {name!r} is not allowed")
        for name, sub in props.items():
            if name in value:
                errors += _structural(value[name], sub, defs, f"{path}.{name}" if path else name)
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            errors += _structural(item, schema["items"], defs, f"{path}[{i}]")
    return errors
