"""Real agents as RFC 005 harnesses: mini-swe-agent and Claude Code, each sandboxed with only the
model endpoint and the MCP bridge reachable (see `relay`)."""

from __future__ import annotations

from openenv._lazy import lazy_exports

_LAZY = {
    "ClaudeCodeAdapter": ".claude_code",
    "MiniSweAgentAdapter": ".mini_swe_agent",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
