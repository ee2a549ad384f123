"""`openenv-tool NAME 'JSON-ARGS'`: the environment's MCP tools as a shell command, for agents
whose only tool is a shell (mini-swe-agent). It calls the harness bridge at `$OPENENV_MCP_URL`.

`openenv-tool --list` prints the tools. The exit status is 0 on success, 1 when the tool
reports an error, 2 on bad usage or an unreachable bridge."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence
from typing import Any, Optional

from openenv import settings

URL_VARIABLE = settings.MCP_URL.name


def _text_of(content: Sequence[Any]) -> str:
    parts = []
    for block in content:
        text = getattr(block, "text", None)
        parts.append(text if text is not None else json.dumps(block.model_dump(mode="json")))
    return "\n".join(parts)


async def _run(url: str, argv: Sequence[str]) -> int:
    from fastmcp import Client

    arguments = _arguments(argv[1:]) if argv[0] != "--list" else {}
    async with Client(url) as client:
        if argv[0] == "--list":
            for tool in await client.list_tools():
                print(f"{tool.name}: {tool.description or ''}".rstrip())
                print(f"  arguments: {json.dumps(tool.inputSchema.get('properties', {}))}")
            return 0
        result = await client.call_tool_mcp(argv[0], arguments)
        print(_text_of(result.content))
        # mcp renamed `isError` to `is_error`; the old name still works, with a warning.
        failed = getattr(result, "is_error", None)
        if failed is None:
            failed = getattr(result, "isError", False)
        return 1 if failed else 0


def _arguments(rest: Sequence[str]) -> dict[str, Any]:
    if not rest:
        return {}
    value = json.loads(rest[0])
    if not isinstance(value, dict):
        raise ValueError("the arguments must be a JSON object")
    return value


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    url = settings.MCP_URL.get()
    if not argv or argv[0] in ("-h", "--help") or not url:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        return asyncio.run(_run(url, argv))
    except (ValueError, json.JSONDecodeError) as exc:
        print(f"openenv-tool: bad arguments: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # the bridge is unreachable or refused the call
        print(f"openenv-tool: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
