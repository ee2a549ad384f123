"""openenv: agentic execution environments for reinforcement learning."""

from __future__ import annotations

from typing import Any

_LAZY = {"GenericEnvClient", "GenericAction", "SyncEnvClient", "EnvClient", "MCPToolClient"}
_LAZY_AUTO = {"AutoEnv", "AutoAction"}


def _version() -> str:
    # Looked up on first use: importlib.metadata scans the installed distributions, which
    # would add ~0.05 s to every client import.
    from importlib import metadata

    try:
        return metadata.version("openenv")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0.0.0"


def __getattr__(name: str) -> Any:
    if name == "__version__":
        version = _version()
        globals()["__version__"] = version
        return version
    if name in _LAZY:
        from . import core

        return getattr(core, name)
    if name in _LAZY_AUTO:
        from . import auto

        return getattr(auto, name)
    raise AttributeError(f"module 'openenv' has no attribute {name!r}")
