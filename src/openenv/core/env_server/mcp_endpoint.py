"""`/mcp`: real MCP over Streamable HTTP and OpenEnv's JSON-RPC, on the server's sessions.

Two dialects share one handler:
- standard MCP (the request carries `Accept: text/event-stream`, `Mcp-Session-Id` or
  `MCP-Protocol-Version`): `initialize` opens a session whose id travels in `Mcp-Session-Id`,
  results use the specification's camel case, tool failures are `isError` results;
- OpenEnv JSON-RPC: `openenv/session/create|close`, `params.session_id`, results in FastMCP's
  snake case with an unwrapped `data`, tool failures as JSON-RPC errors typed in `error.data`.
Either way a session is one environment instance counted against the same capacity.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from fastapi import Request, WebSocket
from fastapi.responses import Response
from pydantic import ValidationError

from ..errors import CapacityReachedError, FactoryError, ServerError, SessionLostError
from ..protocol import (
    CLOSE_NORMAL,
    MAX_REQUEST_ID_CHARS,
    MCP_SESSION_HEADER,
    dumps,
    loads,
    session_id_from_rpc,
    session_log_id,
)
from .flood import FrameBudget
from .mcp_types import JsonRpcErrorCode, JsonRpcRequest, ToolErrorType, rpc_error, rpc_result
from .sessions import Session

if TYPE_CHECKING:
    from .http_server import HTTPEnvServer

logger = logging.getLogger("openenv.server")

SUPPORTED_PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
LATEST_PROTOCOL_VERSION = SUPPORTED_PROTOCOL_VERSIONS[-1]


class _RpcError(Exception):
    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = int(code)
        self.message = message
        self.data = data


#: Requests in one JSON-RPC batch on POST /mcp.
MAX_BATCH = 64


def _refused(reply: Any) -> bool:
    """The reply refuses the frame itself (unparsable, not a request, too large): the sender
    is at fault, and a flood of such frames closes the connection."""
    if not isinstance(reply, dict) or "error" not in reply:
        return False
    code = reply["error"].get("code") if isinstance(reply["error"], dict) else None
    return code in (JsonRpcErrorCode.PARSE_ERROR, JsonRpcErrorCode.INVALID_REQUEST)


def _server_error_to_rpc(exc: ServerError) -> _RpcError:
    if isinstance(exc, SessionLostError):
        return _RpcError(JsonRpcErrorCode.INVALID_PARAMS, exc.message, exc.to_data())
    if isinstance(exc, (CapacityReachedError, FactoryError)):
        return _RpcError(JsonRpcErrorCode.SERVER_ERROR, exc.message, exc.to_data())
    return _RpcError(JsonRpcErrorCode.INTERNAL_ERROR, exc.message, exc.to_data())


def _request_id(message: Any) -> str | int | None:
    """The id to answer an invalid request with: its own when that is a valid JSON-RPC id,
    else null (an id of any other shape is not echoed back)."""
    rid = message.get("id") if isinstance(message, dict) else None
    if type(rid) is int or (type(rid) is str and len(rid) <= MAX_REQUEST_ID_CHARS):
        return rid
    return None


def _session_param(params: dict[str, Any]) -> str | None:
    """`params.session_id` (OpenEnv's dialect): a string id; anything else is invalid params
    (and is not echoed back)."""
    raw = params.get("session_id")
    if raw is not None and (type(raw) is bool or not isinstance(raw, (str, int))):
        raise _RpcError(JsonRpcErrorCode.INVALID_PARAMS, "'session_id' must be a string")
    sid = session_id_from_rpc(params)
    if sid is not None and len(sid) > MAX_REQUEST_ID_CHARS:
        raise _RpcError(
            JsonRpcErrorCode.INVALID_PARAMS, f"Unknown session_id: {session_log_id(sid)}"
        )
    return sid


def _opens_session(method: str, ws_session: Session | None, http_session: Session | None) -> bool:
    """Whether `method` would open a new session (over WebSocket the connection is the
    session; `initialize` on an HTTP session re-uses it)."""
    if ws_session is not None:
        return False
    if method == "openenv/session/create":
        return True
    return method == "initialize" and http_session is None


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


def _is_standard_mcp(request: Request) -> bool:
    headers = request.headers
    return (
        "text/event-stream" in headers.get("accept", "")
        or MCP_SESSION_HEADER in headers
        or "mcp-protocol-version" in headers
    )


class MCPEndpoint:
    def __init__(self, server: HTTPEnvServer) -> None:
        self.server = server
        self.manager = server.manager

    # -- transports --------------------------------------------------------------------

    async def http_post(self, request: Request) -> Response:
        if not _is_json(request.headers.get("content-type", "")):
            # A browser may POST text/plain (or a form) to any origin without asking first; a
            # JSON body is what makes it ask (CORS preflight), which no origin here passes.
            return self._reply(
                rpc_error(
                    None,
                    JsonRpcErrorCode.INVALID_REQUEST,
                    "POST /mcp needs Content-Type: application/json",
                ),
                status=415,
            )
        body = await request.body()
        standard = _is_standard_mcp(request)
        try:
            message = loads(body)
        except ValueError:
            return self._reply(rpc_error(None, JsonRpcErrorCode.PARSE_ERROR, "Parse error"))
        header_sid = request.headers.get(MCP_SESSION_HEADER)
        session: Session | None = None
        if header_sid:
            session = self._lookup(header_sid)
            if session is None:
                # Streamable HTTP: an unknown session means the client must initialize again.
                return self._reply(
                    rpc_error(
                        _request_id(message),
                        JsonRpcErrorCode.INVALID_PARAMS,
                        f"Unknown session_id: {header_sid}",
                    ),
                    status=404,
                )
        extra_headers: dict[str, str] = {}
        if isinstance(message, list):
            if not message or len(message) > MAX_BATCH:
                # JSON-RPC: an empty batch is an invalid request; a long one would hold this
                # connection's calls (and throwaway environments) for as long as it likes.
                why = "an empty batch" if not message else f"a batch of over {MAX_BATCH} requests"
                refused = rpc_error(
                    None, JsonRpcErrorCode.INVALID_REQUEST, f"Invalid request: {why}"
                )
                return self._reply(refused, status=400 if standard else 200)
            replies = []
            for item in message:
                reply = await self.handle(
                    item, http_session=session, standard=standard, in_batch=True
                )
                if reply is not None:
                    replies.append(reply)
            return self._reply(replies) if replies else Response(status_code=202)
        reply = await self.handle(
            message, http_session=session, standard=standard, out_headers=extra_headers
        )
        if reply is None:
            return Response(status_code=202)
        if standard and isinstance(message, dict) and "id" not in message:
            # Streamable HTTP: a notification the server does not accept is an HTTP error
            # (OpenEnv's dialect answers every POST with 200).
            return self._reply(reply, status=400)
        return self._reply(reply, headers=extra_headers)

    async def http_delete(self, request: Request) -> Response:
        sid = request.headers.get(MCP_SESSION_HEADER)
        if not sid:
            return Response(status_code=400)
        session = self._lookup(sid)
        if session is None:
            return Response(status_code=404)
        await self.manager.destroy(session, "closed by MCP client")
        return Response(status_code=200)

    def _count_error(self, exc: ServerError) -> None:
        metrics = self.manager.metrics
        if metrics is not None:
            metrics.error(exc.code, exc.category)

    def _lookup(self, session_id: str) -> Session | None:
        """A live session HTTP MCP may act on (not one a WebSocket connection owns)."""
        try:
            return self.manager.get(session_id, by="mcp")
        except SessionLostError:
            return None

    @staticmethod
    def _reply(payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
        return Response(
            dumps(payload), status_code=status, media_type="application/json", headers=headers
        )

    async def websocket(self, websocket: WebSocket) -> None:
        """WS `/mcp`: one connection is one session; frames are raw JSON-RPC."""
        await websocket.accept()
        try:
            session = await self.manager.create("ws")
        except ServerError as exc:
            self._count_error(exc)
            rpc = _server_error_to_rpc(exc)
            try:
                await websocket.send_text(
                    dumps(rpc_error(None, rpc.code, rpc.message, rpc.data)).decode()
                )
                await websocket.close(code=CLOSE_NORMAL)
            except Exception:
                pass
            return
        session.websocket = websocket
        budget = FrameBudget(self.manager.config)
        try:
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect" or session.closed:
                    return
                raw = message.get("text") or message.get("bytes") or b""
                limit = self.manager.config.max_message_bytes
                size = len(raw)
                if isinstance(raw, str) and size * 4 > limit:
                    size = len(raw.encode())
                reply: dict[str, Any] | None
                if size > limit:
                    reply = rpc_error(
                        None,
                        JsonRpcErrorCode.INVALID_REQUEST,
                        f"Message of {size} bytes exceeds the limit of {limit} bytes",
                    )
                else:
                    try:
                        payload = loads(raw)
                    except ValueError as exc:
                        reply = rpc_error(None, JsonRpcErrorCode.PARSE_ERROR, f"Parse error: {exc}")
                    else:
                        reply = await self.handle(payload, ws_session=session)
                if reply is not None:
                    await websocket.send_text(dumps(reply).decode())
                if not await budget.after_frame(websocket, size, _refused(reply)):
                    return
        except Exception:
            return
        finally:
            session.websocket = None
            await self.manager.destroy(session, "connection closed")

    # -- JSON-RPC ----------------------------------------------------------------------

    async def handle(
        self,
        message: Any,
        *,
        ws_session: Session | None = None,
        http_session: Session | None = None,
        standard: bool = False,
        out_headers: dict[str, str] | None = None,
        in_batch: bool = False,
    ) -> dict[str, Any] | None:
        """Answer one JSON-RPC message; None for a notification.

        A session is only opened when its id can reach the client: `initialize` and
        `openenv/session/create` sent as notifications (no reply to carry the id), and
        `initialize` in a batch (its id travels in a header a batch cannot set; MCP forbids
        it), are refused as invalid requests and open nothing.
        """
        if not isinstance(message, dict):
            return rpc_error(
                None, JsonRpcErrorCode.INVALID_REQUEST, "Invalid request: expected an object"
            )
        try:
            request = JsonRpcRequest.model_validate(message)
        except ValidationError as exc:
            return rpc_error(
                _request_id(message),
                JsonRpcErrorCode.INVALID_REQUEST,
                f"Invalid request: {exc}",
            )
        is_notification = "id" not in message
        if _opens_session(request.method, ws_session, http_session):
            if is_notification:
                # JSON-RPC answers an invalid request with a null id, even for a notification.
                return rpc_error(
                    None,
                    JsonRpcErrorCode.INVALID_REQUEST,
                    f"Invalid request: '{request.method}' opens a session, so it needs an id: "
                    "a notification gets no reply to carry the session id",
                )
            if in_batch and request.method == "initialize":
                return rpc_error(
                    request.id,
                    JsonRpcErrorCode.INVALID_REQUEST,
                    "Invalid request: 'initialize' must not be part of a batch",
                )
        try:
            result = await self._dispatch(
                request,
                ws_session,
                http_session,
                standard,
                out_headers if out_headers is not None else {},
            )
        except _RpcError as err:
            return (
                None if is_notification else rpc_error(request.id, err.code, err.message, err.data)
            )
        except ServerError as exc:
            self._count_error(exc)
            rpc = _server_error_to_rpc(exc)
            return (
                None if is_notification else rpc_error(request.id, rpc.code, rpc.message, rpc.data)
            )
        except Exception as exc:
            logger.exception("MCP method %s failed", request.method)
            return rpc_error(request.id, JsonRpcErrorCode.INTERNAL_ERROR, f"Internal error: {exc}")
        if is_notification:
            return None
        return rpc_result(request.id, result)

    async def _dispatch(
        self,
        request: JsonRpcRequest,
        ws_session: Session | None,
        http_session: Session | None,
        standard: bool,
        out_headers: dict[str, str],
    ) -> Any:
        method = request.method
        params = request.params
        if method.startswith("notifications/"):
            return None
        if method == "ping":
            return {}
        if method == "initialize":
            return await self._initialize(params, ws_session, http_session, standard, out_headers)
        if method == "openenv/session/create":
            if ws_session is not None:
                return {"session_id": ws_session.id}
            session = await self.manager.create("mcp")
            return {"session_id": session.id}
        if method == "openenv/session/close":
            return await self._close_session(params, ws_session)
        if method in ("tools/list", "tools/call"):
            target = ws_session or http_session
            rpc_sid = _session_param(params)
            if target is None and rpc_sid:
                target = self.manager.get(rpc_sid, by="mcp")
            if method == "tools/list":
                return await self._on_env(target, self._list_tools)
            name = params.get("name")
            if not name or not isinstance(name, str):
                raise _RpcError(JsonRpcErrorCode.INVALID_PARAMS, "Missing 'name' in params")
            arguments = params.get("arguments") or {}
            if not isinstance(arguments, dict):
                raise _RpcError(JsonRpcErrorCode.INVALID_PARAMS, "'arguments' must be an object")

            async def call(session: Session) -> Any:
                return await self._call_tool(session, name, arguments, standard)

            return await self._on_env(target, call, counts_as_step=True)
        raise _RpcError(JsonRpcErrorCode.METHOD_NOT_FOUND, f"Method not found: {method}")

    async def _initialize(
        self,
        params: dict[str, Any],
        ws_session: Session | None,
        http_session: Session | None,
        standard: bool,
        out_headers: dict[str, str],
    ) -> dict[str, Any]:
        requested = params.get("protocolVersion")
        version = requested if requested in SUPPORTED_PROTOCOL_VERSIONS else LATEST_PROTOCOL_VERSION
        session = ws_session or http_session
        if session is None:
            session = await self.manager.create("mcp")
            try:
                meta = await self.server.metadata(session)
            except BaseException:
                await self.manager.destroy(session, "initialize failed")
                raise
            out_headers[MCP_SESSION_HEADER] = session.id
        else:
            meta = await self.server.metadata(session)
        return {
            "protocolVersion": version,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": meta.name, "version": meta.version or "1.0.0"},
            "instructions": meta.description,
        }

    async def _close_session(self, params: dict[str, Any], ws_session: Session | None) -> Any:
        sid = _session_param(params)
        if not sid:
            raise _RpcError(
                JsonRpcErrorCode.INVALID_PARAMS, "Invalid params - 'session_id' is required"
            )
        if ws_session is not None and sid == ws_session.id:
            raise _RpcError(
                JsonRpcErrorCode.INVALID_REQUEST,
                "Cannot close the session of this connection over itself; close the connection",
            )
        session = self.manager.get(sid, by="mcp")
        await self.manager.destroy(session, "closed by client")
        return {"session_id": sid, "closed": True}

    async def _on_env(
        self, session: Session | None, work: Any, counts_as_step: bool = False
    ) -> Any:
        if session is None:  # stateless: a throwaway environment
            return await self.manager.with_throwaway_env(
                lambda s: self._run(s, work, counts_as_step)  # a tool call: the step deadline
            )
        return await self._run(session, work, counts_as_step)

    async def _run(self, session: Session, work: Any, counts_as_step: bool = False) -> Any:
        async def run() -> Any:
            return await work(session)

        return await self.manager.call(session, run, counts_as_step=counts_as_step)

    @staticmethod
    def _require_mcp(session: Session) -> Any:
        env = session.env
        if env is None or not hasattr(env, "list_mcp_tools"):
            raise _RpcError(JsonRpcErrorCode.INTERNAL_ERROR, "Environment does not support MCP")
        return env

    async def _list_tools(self, session: Session) -> dict[str, Any]:
        env = self._require_mcp(session)
        tools = await env.list_mcp_tools()
        return {
            "tools": [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]
        }

    async def _call_tool(
        self, session: Session, name: str, arguments: dict[str, Any], standard: bool
    ) -> dict[str, Any]:
        # Here, not at module level: only an MCP environment's server pays for fastmcp's import.
        from .mcp_environment import ToolCallFailed, tool_result_mcp, tool_result_payload

        env = self._require_mcp(session)
        try:
            result = await env.call_tool_raw(name, arguments)
        except ToolCallFailed as failed:
            data = {"error_type": failed.error_type.value}
            if failed.error_type is ToolErrorType.TOOL_NOT_FOUND:
                raise _RpcError(JsonRpcErrorCode.INVALID_PARAMS, failed.message, data) from None
            if standard:  # the specification reports execution failures inside the result
                return {
                    "content": [{"type": "text", "text": failed.message}],
                    "isError": True,
                    "_meta": {"openenv": data},
                }
            code = (
                JsonRpcErrorCode.INVALID_PARAMS
                if failed.error_type is ToolErrorType.INVALID_ARGS
                else JsonRpcErrorCode.INTERNAL_ERROR
            )
            raise _RpcError(code, failed.message, data) from None
        return tool_result_mcp(result) if standard else tool_result_payload(result)
