"""openenv: agentic execution environments for reinforcement learning."""

from __future__ import annotations

from importlib import metadata as _metadata
from typing import Any

try:
    __version__ = _metadata.version("openenv")
except _metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

_LAZY = {"GenericEnvClient", "GenericAction", "SyncEnvClient", "EnvClient", "MCPToolClient"}
_LAZY_AUTO = {"AutoEnv", "AutoAction"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from . import core

        return getattr(core, name)
    if name in _LAZY_AUTO:
        from . import auto

        return getattr(auto, name)
    raise AttributeError(f"module 'openenv' has no attribute {name!r}")
