"""Drive a counter server (counter_server.py) with the *published* OpenEnv 0.10 clients.

Run by tests/compat/test_mcp_tools_api.py with the compat venv's python:
`<compat-python> published_counter_script.py http://127.0.0.1:PORT`. Each check calls the
`bump` tool (which counts in fastmcp's session state) twice in one session and once in a fresh
one, over one transport; the script prints {check: [first, second, fresh]} as JSON (or
{check: {"error": ...}}).
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import httpx
from websockets.asyncio.client import connect

from openenv.core.env_server.mcp_types import CallToolAction
from openenv.core.mcp_client import MCPToolClient


def _rpc(method: str, params: dict[str, Any], rid: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


async def mcp_tool_client(url: str) -> list[Any]:
    """The published client's default: tools/call over HTTP /mcp in its session."""
    counts = []
    async with MCPToolClient(base_url=url) as env:
        counts += [await env.call_tool("bump"), await env.call_tool("bump")]
    async with MCPToolClient(base_url=url) as env:
        counts.append(await env.call_tool("bump"))
    return counts


async def ws_steps(url: str) -> list[Any]:
    """`use_production_mode = False`: CallToolAction steps over /ws."""
    counts = []
    for calls in (2, 1):
        env = MCPToolClient(base_url=url)
        env.use_production_mode = False
        async with env:
            await env.reset()
            for _ in range(calls):
                result = await env.step(CallToolAction(tool_name="bump", arguments={}))
                counts.append(result.observation.result["data"])
    return counts


async def ws_mcp_messages(url: str) -> list[Any]:
    """`{"type": "mcp"}` messages on /ws: one WebSocket connection is one session."""
    counts = []
    for calls in (2, 1):
        async with connect(url.replace("http://", "ws://") + "/ws") as ws:
            for rid in range(calls):
                message = {"type": "mcp", "data": _rpc("tools/call", {"name": "bump"}, rid)}
                await ws.send(json.dumps(message))
                reply = json.loads(await ws.recv())
                counts.append(reply["data"]["result"]["data"])
    return counts


async def http_sessions(url: str) -> list[Any]:
    """JSON-RPC on HTTP /mcp with openenv/session/create and params.session_id."""
    counts = []
    async with httpx.AsyncClient(timeout=30) as http:
        for calls in (2, 1):
            created = await http.post(f"{url}/mcp", json=_rpc("openenv/session/create", {}, 0))
            sid = created.json()["result"]["session_id"]
            for rid in range(calls):
                params = {"name": "bump", "arguments": {}, "session_id": sid}
                reply = await http.post(f"{url}/mcp", json=_rpc("tools/call", params, rid + 1))
                counts.append(reply.json()["result"]["data"])
            await http.post(
                f"{url}/mcp", json=_rpc("openenv/session/close", {"session_id": sid}, 9)
            )
    return counts


async def main(url: str) -> None:
    out: dict[str, Any] = {}
    for check in (mcp_tool_client, ws_steps, ws_mcp_messages, http_sessions):
        try:
            out[check.__name__] = await check(url)
        except Exception as exc:
            out[check.__name__] = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
