"""Which environment tools a harness gets, and under which names."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..env_server.mcp_types import RESERVED_TOOL_NAMES


def _name(tool: Any) -> str:
    return str(tool["name"] if isinstance(tool, dict) else tool.name)


def _renamed(tool: Any, name: str) -> Any:
    if isinstance(tool, dict):
        return {**tool, "name": name}
    return tool.model_copy(update={"name": name})


def tools_line(names: Iterable[str]) -> str:
    """The sentence of an episode's opening message that names the tools to use (see
    `sessions.observation_messages`; `AgentHarnessAdapter` rewrites it to name the tools the way
    the agent sees them, `AgenticHarnessAdapter.tools_sentence`)."""
    return "Use the tools: " + ", ".join(names) + "."


def resolve_tool_conflicts(
    env_tools: list[Any], harness_builtin_tools: Iterable[str], prefix: str = "env_"
) -> list[Any]:
    """Copies of `env_tools`, in order, with every name that clashes with a harness built-in
    renamed `prefix + name`. Refuses (ValueError) reserved names (reset/step/state/close: the
    harness must never drive the episode), duplicates, and clashes a prefix cannot resolve."""
    builtins = set(harness_builtin_tools)
    names = [_name(tool) for tool in env_tools]
    reserved = sorted(set(names) & set(RESERVED_TOOL_NAMES))
    if reserved:
        raise ValueError(f"tools may not be named {reserved}: those names drive the episode")
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"duplicate environment tool names: {duplicates}")
    resolved = []
    for tool, name in zip(env_tools, names, strict=True):
        if name in builtins:
            new = prefix + name
            if new in builtins or new in names:
                raise ValueError(
                    f"tool {name!r} clashes with a harness built-in, and {new!r} is taken too"
                )
            tool = _renamed(tool, new)
        resolved.append(tool)
    final = [_name(tool) for tool in resolved]
    if len(set(final)) != len(final):
        raise ValueError(f"tool names still clash after renaming: {final}")
    return resolved
