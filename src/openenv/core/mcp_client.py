"""Clients for MCP tool environments.

By default (`use_production_mode` true) tools are listed and called with JSON-RPC over HTTP
`/mcp` in a server session (`openenv/session/create`), and reset/step/state go over `/ws`
attached to that same session. With `client.use_production_mode = False` tools are listed and
called as Gym steps (`ListToolsAction` / `CallToolAction`) over `/ws`, so they count as steps and
carry rewards. As in OpenEnv, `mode` can only be "production": a client for simulation mode's
HTTP routes is `GenericEnvClient`.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from .client_types import StepResult
from .env_client import EnvClient
from .env_server.mcp_types import (
    CallToolAction,
    CallToolObservation,
    ExecuteCodeAction,
    ExecuteCodeObservation,
    ListToolsAction,
    ListToolsObservation,
    Tool,
)
from .env_server.types import Observation, State

if TYPE_CHECKING:
    import asyncio
    import ssl

    import httpx
    from typing_extensions import Self
from .errors import (
    ProtocolViolationError,
    ServerError,
    ServerUnreachableError,
    ToolCallError,
    error_from_data,
)


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One TLS context per process, shared by every client (building one reads the CA bundle)."""
    import ssl

    return ssl.create_default_context()


class MCPClientBase(EnvClient[Any, Observation, State]):
    """Lists tools (`list_tools`, `get_tool`, `has_tool`); `MCPToolClient` also calls them.

    The arguments are OpenEnv's, in its order; `EnvClient`'s own keyword options (`resume`,
    `unix_socket`, `api_key`, ...) are accepted too.
    """

    def __init__(
        self,
        base_url: str | None = None,
        connect_timeout_s: float = 10.0,
        message_timeout_s: float = 60.0,
        websocket_ping_interval_s: float | None = 20.0,
        websocket_ping_timeout_s: float | None = 20.0,
        provider: Any = None,
        mode: str | None = None,
        max_message_size_mb: float = 100.0,
        headers: dict[str, str] | None = None,
        **kwargs: Any,
    ):
        # Unlike EnvClient, OPENENV_CLIENT_MODE is not consulted: it names the mode of Gym clients.
        if mode is not None and mode.strip().lower() != "production":
            raise ValueError(
                f"{type(self).__name__} needs mode='production' (got {mode!r}); for a server's "
                "simulation-mode HTTP routes use GenericEnvClient, and to call tools as Gym steps "
                "over /ws set `client.use_production_mode = False`."
            )
        kwargs.setdefault("ping_interval_s", websocket_ping_interval_s)
        kwargs.setdefault("ping_timeout_s", websocket_ping_timeout_s)
        super().__init__(
            base_url,
            connect_timeout_s,
            message_timeout_s,
            max_message_size_mb,
            provider,
            "production",
            headers=headers,
            **kwargs,
        )
        self._tools_cache: list[Tool] | None = None
        #: True: tools over HTTP `/mcp`; False: tools as steps over `/ws`. Settable at any time.
        self.use_production_mode = True
        self._http_client: httpx.AsyncClient | None = None
        self._http_loop: asyncio.AbstractEventLoop | None = None
        self._production_session_id: str | None = None

    # -- HTTP JSON-RPC (production mode) -----------------------------------------------

    async def _rpc(self, method: str, params: dict[str, Any] | None = None) -> Any:
        import asyncio

        import httpx  # on first use: httpx (and its CLI's imports) cost ~0.3 s at import

        if self._http_client is not None and self._http_loop is not asyncio.get_running_loop():
            # Made on another event loop (async use that ended, then sync use): unusable here.
            self._http_client = None
        if self._http_client is None:
            self._http_loop = asyncio.get_running_loop()
            self._http_client = httpx.AsyncClient(
                transport=(
                    # A Unix socket carries plain HTTP: no TLS context (the transport would
                    # build its own, ignoring `verify` below).
                    httpx.AsyncHTTPTransport(uds=self.unix_socket, verify=False)
                    if self.unix_socket
                    else None
                ),
                headers=self.headers,
                # A TLS context costs ~60 ms to build (CA bundle); plain HTTP needs none.
                verify=_tls_context() if self.base_url.startswith("https://") else False,
                timeout=httpx.Timeout(self.message_timeout_s, connect=self.connect_timeout_s),
            )
        body = {
            "jsonrpc": "2.0",
            "method": method,
            "params": params or {},
            "id": next(self._rpc_ids),
        }
        try:
            response = await self._http_client.post(f"{self.base_url}/mcp", json=body)
        except httpx.TransportError as exc:
            unreachable = ServerUnreachableError(
                f"MCP request {method} to {self.base_url}/mcp failed: {exc or type(exc).__name__}"
                ". Is the environment server running at this address (try GET /health)?"
            )
            unreachable.__cause__ = exc
            raise await self._environment_died(unreachable) from exc
        try:
            reply = response.json()
        except ValueError:
            reply = None
        if not isinstance(reply, dict) or (response.is_error and not reply.get("error")):
            detail = reply.get("detail") if isinstance(reply, dict) else None
            if isinstance(detail, dict) and "code" in detail:
                raise error_from_data(detail)
            raise ServerError(
                f"MCP request {method} got HTTP {response.status_code}: {response.text[:200]}",
                "SESSION_ERROR",
            )
        error = reply.get("error")
        if error:
            raise _rpc_exception(method, params or {}, error)
        return reply.get("result")

    async def _ensure_mcp_session(self) -> str:
        if self._production_session_id is None:
            result = await self._rpc("openenv/session/create")
            self._production_session_id = str(result["session_id"])
        return self._production_session_id

    async def _connect_async(self) -> Self:
        if self.use_production_mode and self._ws is None:
            # The WebSocket attaches to the same server session as the HTTP tool calls.
            self._attach_session_id = await self._ensure_mcp_session()
        await super()._connect_async()
        return self

    async def _close_async(self) -> None:
        sid, self._production_session_id = self._production_session_id, None
        await super()._close_async()
        if self._http_client is not None:
            if sid is not None:
                try:
                    await self._rpc("openenv/session/close", {"session_id": sid})
                except (ServerError, ServerUnreachableError, ToolCallError):
                    pass  # already closed with the WebSocket session
            await self._http_client.aclose()
            self._http_client = None

    # -- tools ------------------------------------------------------------------------------

    async def list_tools(self, use_cache: bool = True) -> list[Tool]:
        if use_cache and self._tools_cache is not None:
            return list(self._tools_cache)
        if self.use_production_mode:
            sid = await self._ensure_mcp_session()
            result = await self._rpc("tools/list", {"session_id": sid})
            tools = [_tool_from_payload(t) for t in result.get("tools", [])]
        else:
            step = await self.step(ListToolsAction())
            if not isinstance(step.observation, ListToolsObservation):
                raise ProtocolViolationError("list_tools did not return a ListToolsObservation")
            tools = list(step.observation.tools)
        self._tools_cache = tools
        return list(tools)

    async def get_tool(self, name: str) -> Tool | None:
        return next((t for t in await self.list_tools() if t.name == name), None)

    async def has_tool(self, name: str) -> bool:
        return await self.get_tool(name) is not None

    # -- parse hooks ----------------------------------------------------------------------

    def _step_payload(self, action: Any) -> dict[str, Any]:
        if isinstance(action, ListToolsAction):
            return {"type": "list_tools"}
        if isinstance(action, CallToolAction):
            return {
                "type": "call_tool",
                "tool_name": action.tool_name,
                "arguments": action.arguments,
            }
        return super()._step_payload(action)

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[Any]:
        obs = dict(payload.get("observation") or {})
        inner_meta = obs.pop("metadata", None)
        metadata = payload.get("metadata") or inner_meta or {}
        reward, done = payload.get("reward"), bool(payload.get("done", False))
        common: dict[str, Any] = {"reward": reward, "done": done, "metadata": metadata}
        observation: Observation
        cls = self.observation_type
        if "tools" in obs:
            observation = ListToolsObservation.model_validate(
                {"tools": [_tool_from_payload(t) for t in obs["tools"]], **common}
            )
        elif "tool_name" in obs:
            raw = obs.get("result")
            if isinstance(raw, dict):
                obs["result"] = ToolResult(raw)
            observation = CallToolObservation.model_validate({**obs, **common})
        elif "tool_calls" in obs and "stdout" in obs:
            observation = ExecuteCodeObservation.model_validate({**obs, **common})
        elif isinstance(cls, type) and issubclass(cls, Observation) and cls is not Observation:
            observation = cls.model_validate({**obs, **common})
        else:
            observation = MCPObservation.model_validate({**obs, **common})
        return StepResult(observation=observation, reward=reward, done=done, metadata=metadata)


class ToolResult(dict[str, Any]):
    """A tool call's result as the client receives it: the MCP result as a dict, as OpenEnv's
    client gives it (`result["data"]` is the tool's value), whose keys also read as attributes
    (`result.data`, `result.is_error`), as fastmcp's `CallToolResult` does in process. As text it
    is the tool's value, so `print(observation.result)` shows what OpenEnv's README says it does;
    `repr()` shows the whole result."""

    def __str__(self) -> str:
        return str(self["data"]) if "data" in self else super().__str__()

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"tool result has no {name!r}; it has {sorted(self)}") from None


class MCPObservation(Observation):
    """An MCP environment's reset/other observation; keeps whatever fields the server sent."""

    model_config = {"extra": "allow"}


#: OpenEnv's name for `MCPObservation`.
GenericMCPObservation = MCPObservation


class MCPToolClient(MCPClientBase):
    """Client for MCP tool environments; `call_tool` returns the tool's value."""

    async def call_tool(self, name: str, **arguments: Any) -> Any:
        if self.use_production_mode:
            sid = await self._ensure_mcp_session()
            result = await self._rpc(
                "tools/call", {"name": name, "arguments": arguments, "session_id": sid}
            )
            if isinstance(result, dict) and "data" in result:
                return result["data"]
            return result
        step = await self.step(CallToolAction(tool_name=name, arguments=arguments))
        obs = step.observation
        if not isinstance(obs, CallToolObservation):
            raise ProtocolViolationError(f"call_tool {name!r} did not return a CallToolObservation")
        if obs.error is not None:
            raise ToolCallError(name, obs.error.error_type.value, obs.error.message)
        if isinstance(obs.result, ToolResult) and "data" in obs.result:
            return obs.result["data"]
        return obs.result

    async def execute_code(
        self, code: str, timeout_s: float | None = None
    ) -> ExecuteCodeObservation:
        """Code mode: run Python in the server's sandbox with the tools as functions (one step
        over `/ws`, in this client's session); the observation has the code's `result`, its
        output, its error and the tool calls it made. `timeout_s` shortens the server's wall
        time for the code (it cannot lengthen it)."""
        options = {} if timeout_s is None else {"timeout_s": timeout_s}
        step = await self.step(ExecuteCodeAction(code=code), **options)
        if not isinstance(step.observation, ExecuteCodeObservation):
            raise ProtocolViolationError("execute_code did not return an ExecuteCodeObservation")
        return step.observation


def _tool_from_payload(raw: Any) -> Tool:
    if isinstance(raw, Tool):
        return raw
    schema = raw.get("input_schema") or raw.get("inputSchema") or {}
    return Tool(name=raw["name"], description=raw.get("description") or "", input_schema=schema)


def _rpc_exception(method: str, params: dict[str, Any], error: dict[str, Any]) -> Exception:
    data = error.get("data") or {}
    message = str(error.get("message", "error"))
    if method == "tools/call" and isinstance(data, dict) and data.get("error_type"):
        return ToolCallError(str(params.get("name")), str(data["error_type"]), message)
    if method == "tools/call":
        return ToolCallError(str(params.get("name")), "execution_error", message)
    code = data.get("code") if isinstance(data, dict) else None
    return ServerError(
        f"{method} failed: {message}",
        str(code or error.get("code")),
        data if isinstance(data, dict) else {},
    )
