"""Conversions between Gymnasium space values and JSON, and JSON descriptions of spaces."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from gymnasium import spaces


class SpaceValueError(ValueError):
    """A JSON value is not a member of a space; `path` names the offending field."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.reason = message


def _bound(value: float) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def _bounds(array: np.ndarray) -> Any:
    """A scalar when every element is equal (the usual case), else the nested list."""
    flat = array.reshape(-1)
    if flat.size and np.all(flat == flat[0]):
        return _bound(flat[0])
    return to_jsonable_any(array)


def describe_space(space: spaces.Space) -> dict[str, Any]:
    """A JSON description of a space (infinite bounds are `null`)."""
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.Box):
        return {
            "type": "Box",
            "shape": list(space.shape),
            "dtype": str(space.dtype),
            "low": _bounds(space.low),
            "high": _bounds(space.high),
        }
    if isinstance(space, spaces.MultiBinary):
        return {"type": "MultiBinary", "shape": list(np.atleast_1d(space.shape))}
    if isinstance(space, spaces.MultiDiscrete):
        return {
            "type": "MultiDiscrete",
            "shape": list(space.shape),
            "nvec": space.nvec.tolist(),
            "start": space.start.tolist(),
        }
    if isinstance(space, spaces.Dict):
        return {"type": "Dict", "spaces": {k: describe_space(s) for k, s in space.spaces.items()}}
    if isinstance(space, spaces.Tuple):
        return {"type": "Tuple", "spaces": [describe_space(s) for s in space.spaces]}
    if isinstance(space, spaces.Text):
        return {
            "type": "Text",
            "min_length": int(space.min_length),
            "max_length": int(space.max_length),
        }
    return {"type": type(space).__name__, "repr": repr(space)}


def to_jsonable_any(value: Any) -> Any:
    """Any value (numpy arrays and scalars included) as JSON; non-finite floats become null."""
    if isinstance(value, np.ndarray):
        return to_jsonable_any(value.tolist())
    if isinstance(value, np.generic):
        return to_jsonable_any(value.item())
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): to_jsonable_any(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable_any(v) for v in value]
    return repr(value)


def to_jsonable(space: spaces.Space, value: Any) -> Any:
    """A member of `space` as JSON (see the module docstring of `gymnasium_env.models`)."""
    if isinstance(space, spaces.Discrete):
        return int(value)
    if isinstance(space, (spaces.Box, spaces.MultiBinary, spaces.MultiDiscrete)):
        return np.asarray(value).tolist()
    if isinstance(space, spaces.Dict):
        return {k: to_jsonable(s, value[k]) for k, s in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return [to_jsonable(s, v) for s, v in zip(space.spaces, value, strict=False)]
    return to_jsonable_any(value)


def _int(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpaceValueError(path, f"expected an integer, got {value!r}")
    if isinstance(value, float) and not value.is_integer():
        raise SpaceValueError(path, f"expected an integer, got {value!r}")
    return int(value)


def _array(value: Any, space: spaces.Space, path: str, dtype: Any) -> np.ndarray:
    try:
        array = np.asarray(value, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise SpaceValueError(
            path, f"expected numbers of shape {list(space.shape)}, got {value!r}"
        ) from exc
    shape = tuple(space.shape)
    if array.shape != shape:
        if array.size == int(np.prod(shape)) and array.ndim <= 1:
            array = array.reshape(shape)  # a scalar for shape (1,), a flat list for (1, n)...
        else:
            raise SpaceValueError(
                path, f"expected shape {list(shape)}, got shape {list(array.shape)}"
            )
    return array


def from_jsonable(space: spaces.Space, value: Any, path: str = "action") -> Any:
    """Check a JSON value against `space` and convert it to the space's native type.

    Raises `SpaceValueError` naming the field (`action`, `action.key`, `action[1]`...).
    """
    if isinstance(space, spaces.Discrete):
        n = _int(value, path)
        low, high = int(space.start), int(space.start + space.n - 1)
        if not low <= n <= high:
            raise SpaceValueError(path, f"{n} is out of range [{low}, {high}] of {space}")
        return np.int64(n)
    if isinstance(space, spaces.Box):
        integer = np.issubdtype(space.dtype, np.integer)
        if integer:
            array = _array(value, space, path, np.float64)
            if not np.all(np.mod(array, 1) == 0):
                raise SpaceValueError(path, f"expected integers, got {value!r}")
        else:
            array = _array(value, space, path, np.float64)
        if not np.all(np.isfinite(array)):
            raise SpaceValueError(path, "values must be finite")
        below = array < space.low
        above = array > space.high
        if below.any() or above.any():
            index = np.argwhere(below | above)[0]
            where = "".join(f"[{i}]" for i in index) if array.ndim else ""
            raise SpaceValueError(
                f"{path}{where}",
                f"{array[tuple(index)].item()} is out of bounds "
                f"[{space.low[tuple(index)].item()}, {space.high[tuple(index)].item()}] of {space}",
            )
        return array.astype(space.dtype)
    if isinstance(space, spaces.MultiBinary):
        array = _array(value, space, path, np.float64)
        if not np.all((array == 0) | (array == 1)):
            raise SpaceValueError(path, f"expected 0/1 values, got {value!r}")
        return array.astype(space.dtype)
    if isinstance(space, spaces.MultiDiscrete):
        array = _array(value, space, path, np.float64)
        if not np.all(np.mod(array, 1) == 0):
            raise SpaceValueError(path, f"expected integers, got {value!r}")
        if np.any(array < space.start) or np.any(array >= space.start + space.nvec):
            raise SpaceValueError(path, f"{value!r} is out of range of {space}")
        return array.astype(space.dtype)
    if isinstance(space, spaces.Dict):
        if not isinstance(value, dict):
            raise SpaceValueError(path, f"expected an object with keys {list(space.spaces)}")
        missing = [k for k in space.spaces if k not in value]
        extra = [k for k in value if k not in space.spaces]
        if missing or extra:
            raise SpaceValueError(path, f"missing keys {missing}, unexpected keys {extra}")
        return {k: from_jsonable(s, value[k], f"{path}.{k}") for k, s in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        if not isinstance(value, (list, tuple)) or len(value) != len(space.spaces):
            raise SpaceValueError(path, f"expected a list of {len(space.spaces)} values")
        return tuple(
            from_jsonable(s, v, f"{path}[{i}]")
            for i, (s, v) in enumerate(zip(space.spaces, value, strict=True))
        )
    if not space.contains(value):
        raise SpaceValueError(path, f"{value!r} is not in {space}")
    return value
