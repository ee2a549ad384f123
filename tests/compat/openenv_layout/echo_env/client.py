"""Client of the echo environment: OpenEnv's MCP tool client, under the environment's name."""

from openenv.core.mcp_client import MCPToolClient


class EchoEnv(MCPToolClient):
    """`list_tools()` and `call_tool(name, **arguments)`, plus `reset`/`step`/`state`."""
