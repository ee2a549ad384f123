"""Sync client code written the way OpenEnv 0.10's docs show it: no `.sync()`, no event loop.

Run by tests/compat/test_sync_clients.py with either package's python against either package's
echo server: `<python> sync_client_snippet.py http://127.0.0.1:PORT`. It imports only names both
packages have and prints one JSON object of what it saw, so the four runs can be compared.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import sys
from typing import Any

from openenv.core import GenericEnvClient, MCPToolClient

URL = sys.argv[1]
CALL = {"type": "call_tool", "tool_name": "echo_message", "arguments": {"message": "plain"}}
seen: dict[str, Any] = {}

# Plain `with` in sync code.
with GenericEnvClient(base_url=URL) as env:
    result = env.reset()
    seen["reset"] = [type(result).__name__, result.done, result.metadata.get("status")]
    result = env.step(CALL)
    seen["step"] = [type(result).__name__, result.done, "plain" in json.dumps(result.observation)]
    seen["step_count"] = env.state()["step_count"]

# Without `with`: calls, then close().
env = GenericEnvClient(base_url=URL)
seen["no_with"] = [type(env.reset()).__name__, env.close()]

# A client used from sync code refuses async use.
env = GenericEnvClient(base_url=URL)
env.reset()


async def use_from_async_code() -> None:
    async with env:
        pass


try:
    asyncio.run(use_from_async_code())
    seen["mixed"] = None
except RuntimeError:
    seen["mixed"] = "RuntimeError"
env.close()

# A notebook cell: sync code inside a running loop.


async def cell() -> list[Any]:
    with GenericEnvClient(base_url=URL) as env:
        return [type(env.reset()).__name__, type(env.state()).__name__]


seen["in_running_loop"] = asyncio.run(cell())

# MCP tool methods stay async-only; reset/step are dual-mode.
with MCPToolClient(base_url=URL) as env:
    tools = env.list_tools()
    seen["mcp_list_tools_awaitable"] = inspect.isawaitable(tools)
    tools.close()
    seen["mcp_reset"] = env.reset().metadata.get("status")

print(json.dumps(seen))
