"""The MCP server a harness reaches the environment's tools through (RFC 005).

The harness is an outside agent: it gets the environment's tools over real MCP (streamable
HTTP), under the names `resolve_tool_conflicts` gave them, and never the operations that drive
the episode (`reset`, `step`, `state`, `close`): those stay with the trainer.
"""

from __future__ import annotations

import threading
from typing import Optional

from fastmcp import FastMCP
from fastmcp.tools import Tool

from ..env_server.mcp_types import RESERVED_TOOL_NAMES
from .adapter import HarnessError
from .capture.serving import ThreadedServer

#: The path the bridge serves MCP on.
MCP_PATH = "/mcp"


async def build_bridge_server(mcp_server: FastMCP, renames: dict[str, str]) -> FastMCP:
    """The server to bridge: `mcp_server` itself when nothing is renamed (and no reserved name
    slipped in), else a view that serves each tool under its injected name (`renames` maps
    injected name -> source name) and leaves out `reset`/`step`/`state`/`close`."""
    tools = {tool.name: tool for tool in await mcp_server.list_tools()}
    missing = sorted(source for source in renames.values() if source not in tools)
    if missing:
        raise HarnessError(f"cannot bridge tools {missing}: the environment has no such tools")
    if not renames and not (set(tools) & RESERVED_TOOL_NAMES):
        return mcp_server
    injected_for = {source: injected for injected, source in renames.items()}
    view = FastMCP(name=f"{mcp_server.name} (harness bridge)")
    for name, tool in tools.items():
        if name in RESERVED_TOOL_NAMES:
            continue
        view.add_tool(Tool.from_tool(tool, name=injected_for.get(name, name)))
    return view


class HarnessMCPBridge:
    """Serves a FastMCP server's tools to a harness over MCP streamable HTTP, from uvicorn on
    a daemon thread: on an ephemeral loopback port, or on a Unix socket (`uds`) that a relay
    makes reachable inside a sandbox with no network."""

    def __init__(
        self, mcp_server: FastMCP, host: str = "127.0.0.1", *, uds: Optional[str] = None
    ) -> None:
        self.mcp_server = mcp_server
        self.host = host
        self.uds = uds
        self._server: Optional[ThreadedServer] = None
        self._url: Optional[str] = None
        self._lock = threading.Lock()

    @property
    def url(self) -> Optional[str]:
        """The MCP URL while serving (with `uds`, the host part is nominal), else None."""
        return self._url

    def start(self, timeout_s: float = 10.0, *, uds: Optional[str] = None) -> str:
        """Serve, and return the MCP URL; a second call returns the same URL."""
        with self._lock:
            if self._url is not None:
                return self._url
            if uds is not None:
                self.uds = uds
            server = ThreadedServer(
                self.mcp_server.http_app(path=MCP_PATH),
                host=self.host,
                uds=self.uds,
                tcp=self.uds is None,
                uds_mode=0o600,
                # An MCP client that keeps a stream open must not hold up `stop()`.
                graceful_s=2,
            )
            try:
                base = server.start(timeout_s)
            except (RuntimeError, TimeoutError, OSError) as exc:
                raise HarnessError(f"the harness MCP bridge did not start: {exc}") from exc
            self._server = server
            self._url = base + MCP_PATH
            return self._url

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop serving; idempotent. Raises HarnessError if the server thread does not end."""
        with self._lock:
            server, self._server, self._url = self._server, None, None
            if server is None:
                return
            thread = server._thread
            server.stop(timeout_s)
            if thread is not None and thread.is_alive():
                raise HarnessError(f"the harness MCP bridge did not stop within {timeout_s:g}s")
