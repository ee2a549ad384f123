"""Real agents as RFC 005 harnesses: mini-swe-agent and Claude Code, each sandboxed with only the
model endpoint and the MCP bridge reachable (see `relay`)."""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "ClaudeCodeAdapter": ".claude_code",
    "MiniSweAgentAdapter": ".mini_swe_agent",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
