"""The `/ws` endpoint: OpenEnv's WebSocket protocol plus request ids and session resume.

Extensions are opt-in and invisible to OpenEnv clients:
- a message may carry `"id"`; its reply (or error) carries the same `"id"`;
- offering the `openenv.v1` subprotocol (or `/ws?resumable=1`) makes the server send one
  `{"type":"session"}` frame with the session id and keep the session for `resume_grace_s` after
  the connection drops; `/ws?session_id=X` attaches to (or resumes) session X. A re-sent request
  whose id was already answered gets the stored reply, so no step is lost or applied twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError
from starlette.websockets import WebSocket

from .errors import (
    CapacityError,
    ServerSideError,
    SessionNotFoundError,
    error_data,
    exception_message,
)
from .serialization import (
    deserialize_action,
    dumps,
    dumps_observation,
    loads,
    serialize_observation,
)
from .sessions import CLOSE_TAKEN_OVER, Session
from .types import (
    WSCloseMessage,
    WSErrorCode,
    WSMCPMessage,
    WSResetMessage,
    WSStateMessage,
    WSStepMessage,
)

if TYPE_CHECKING:
    from .http_server import HTTPEnvServer

logger = logging.getLogger("openenv.server")

_ENVELOPES: dict[str, type[BaseModel]] = {
    "reset": WSResetMessage,
    "step": WSStepMessage,
    "state": WSStateMessage,
    "close": WSCloseMessage,
    "mcp": WSMCPMessage,
}
_TRUE = frozenset({"1", "true", "yes", "on"})
#: WebSocket subprotocol a client offers to say it speaks the extensions (ids, resume).
SUBPROTOCOL = "openenv.v1"


def validation_errors(exc: ValidationError) -> list[dict[str, Any]]:
    return loads(exc.json(include_url=False))


def describe_validation(exc: ValidationError, what: str) -> str:
    parts = []
    for err in exc.errors(include_url=False)[:5]:
        loc = ".".join(str(p) for p in err.get("loc", ())) or "(root)"
        parts.append(f"{loc}: {err.get('msg')}")
    return f"Invalid {what}: " + "; ".join(parts)


def _frame(kind: str, data: Any, request_id: Any = None) -> str:
    msg: dict[str, Any] = {"type": kind, "data": data}
    if request_id is not None:
        msg["id"] = request_id
    return dumps(msg).decode()


def observation_frame(obs: Any, request_id: Any) -> str:
    msg: dict[str, Any] = {"type": "observation", "data": serialize_observation(obs)}
    if request_id is not None:
        msg["id"] = request_id
    return dumps_observation(msg, obs).decode()


def error_frame(data: dict[str, Any], request_id: Any = None) -> str:
    return _frame("error", data, request_id)


def invalid_frame(exc: ValidationError, what: str, request_id: Any) -> str:
    """OpenEnv's VALIDATION_ERROR frame, plus a `detail` that names the offending fields."""
    data = error_data(
        WSErrorCode.VALIDATION_ERROR,
        "Invalid message",
        errors=validation_errors(exc),
        detail=describe_validation(exc, what),
    )
    return error_frame(data, request_id)


_STEP_KEYS = frozenset({"type", "data", "id"})


def _plain_step(msg: dict[str, Any], request_id: Any) -> bool:
    """Whether `msg` is a step frame that `WSStepMessage` would accept as it is."""
    return (
        msg.get("type") == "step"
        and type(msg.get("data")) is dict
        and (request_id is None or type(request_id) in (str, int))
        and _STEP_KEYS.issuperset(msg)
    )


class _Close(Exception):
    """The client asked to end the session."""

    def __init__(self, request_id: Any) -> None:
        self.request_id = request_id


class WebSocketHandler:
    def __init__(self, server: HTTPEnvServer) -> None:
        self.server = server
        self.manager = server.manager

    async def __call__(self, websocket: WebSocket) -> None:
        extended = SUBPROTOCOL in websocket.scope.get("subprotocols", ())
        await websocket.accept(subprotocol=SUBPROTOCOL if extended else None)
        params = websocket.query_params
        session: Session | None = None
        early: list[Any] = []  # frames (or a pending receive) that arrived while queued
        try:
            requested = params.get("session_id")
            if requested:
                session = await self._attach(websocket, requested, extended)
            else:
                try:
                    session = await self._create_watching(websocket, early)
                except ServerSideError as exc:
                    await self._refuse(websocket, exc.to_data())
                    return
                if session is None:
                    return  # the client left while waiting for a slot
                session.websocket = websocket
                if extended or params.get("resumable", "").lower() in _TRUE:
                    await self._announce(websocket, session, resumed=False)
            if session is None:
                return
            await self._serve(websocket, session, early)
        finally:
            if session is not None:
                await self._detach(websocket, session)

    async def _create_watching(self, websocket: WebSocket, early: list[Any]) -> Session | None:
        """Create the session; while queued for a slot, notice a client that leaves.

        Frames that arrive while queued are kept in `early` (in order) for `_serve`, followed by
        the receive still in flight, if any.
        """
        if self.manager.slots.has_free_slot():
            return await self.manager.create("ws")
        loop = asyncio.get_running_loop()
        creating = loop.create_task(self.manager.create("ws"))
        receiving: asyncio.Future[Any] | None = None
        try:
            while True:
                if receiving is None:
                    receiving = loop.create_task(websocket.receive())
                done, _ = await asyncio.wait(
                    {creating, receiving}, return_when=asyncio.FIRST_COMPLETED
                )
                if receiving in done:
                    message = receiving.result()
                    receiving = None
                    if message["type"] == "websocket.disconnect":
                        creating.cancel()
                        with contextlib.suppress(BaseException):
                            session = await creating
                            await self.manager.destroy(session, "client left while queued")
                        return None
                    if len(early) >= 64:
                        creating.cancel()
                        raise CapacityError("Too many messages sent while waiting for a slot")
                    early.append(message)
                if creating in done:
                    if receiving is not None:
                        early.append(receiving)
                        receiving = None
                    return creating.result()
        except BaseException:
            creating.cancel()
            if receiving is not None:
                receiving.cancel()
            raise

    async def _refuse(self, websocket: WebSocket, data: dict[str, Any]) -> None:
        try:
            await websocket.send_text(error_frame(data))
            await websocket.close(code=1000)
        except Exception:
            pass

    async def _attach(
        self, websocket: WebSocket, session_id: str, extended: bool
    ) -> Session | None:
        try:
            session = self.manager.get(session_id)
        except SessionNotFoundError as exc:
            data = exc.to_data()
            # OpenEnv clients know this failure as SESSION_ERROR; the `reason` says more.
            data["code"] = WSErrorCode.SESSION_ERROR.value
            data["reason"] = WSErrorCode.SESSION_NOT_FOUND.value
            await self._refuse(websocket, data)
            return None
        previous = session.websocket
        session.websocket = websocket
        session.detached_at = None
        session.touch()
        if previous is not None and previous is not websocket:
            # The old connection is presumably dead (the client came back); it loses the session.
            try:
                await previous.close(code=CLOSE_TAKEN_OVER, reason="session resumed elsewhere")
            except Exception:
                pass
        if extended or session.resumable:
            await self._announce(websocket, session, resumed=True)
        return session

    async def _announce(self, websocket: WebSocket, session: Session, resumed: bool) -> None:
        session.make_resumable()
        config = self.manager.config
        data = {
            "session_id": session.id,
            "resumed": resumed,
            "resume_grace_s": config.resume_grace_s,
            "session_timeout_s": config.session_timeout,
            "step_count": session.step_count,
        }
        await websocket.send_text(_frame("session", data))

    async def _detach(self, websocket: WebSocket, session: Session) -> None:
        if session.websocket is not websocket or session.closed:
            return  # another connection took over, or the session already ended
        session.websocket = None
        if session.transport != "ws":
            return  # owned by HTTP/MCP: it ends by explicit close or idle timeout
        if session.resumable:
            session.detached_at = time.monotonic()
            self.manager.ensure_reaper()
            return
        await self.manager.destroy(session, "connection closed")

    async def _serve(self, websocket: WebSocket, session: Session, early: list[Any]) -> None:
        receive = websocket.receive
        limit = self.manager.config.max_message_bytes
        while True:
            if early:
                item = early.pop(0)
                message = await item if isinstance(item, asyncio.Future) else item
            else:
                message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            raw = message.get("text")
            if raw is None:
                raw = message.get("bytes") or b""
            if session.closed or session.websocket is not websocket:
                return
            size = len(raw)
            if isinstance(raw, str) and size * 4 > limit:
                size = len(raw.encode())
            if size > limit:
                reply: str | None = error_frame(
                    error_data(
                        WSErrorCode.MESSAGE_TOO_LARGE,
                        f"Message of {size} bytes exceeds the limit of {limit} bytes",
                        limit=limit,
                    )
                )
            else:
                try:
                    reply = await self._handle(session, raw)
                except _Close as close:
                    await self.manager.destroy(session, "closed by client")
                    if close.request_id is not None:
                        try:
                            await websocket.send_text(_frame("closed", {}, close.request_id))
                        except Exception:
                            pass
                    try:
                        await websocket.close(code=1000)
                    except Exception:
                        pass
                    return
            if reply is None:
                continue
            try:
                await websocket.send_text(reply)
            except Exception:
                return  # the reply stays stored for a resumed connection

    async def _handle(self, session: Session, raw: str | bytes) -> str | None:
        try:
            msg = loads(raw)
        except ValueError as exc:
            return error_frame(error_data(WSErrorCode.INVALID_JSON, f"Invalid JSON: {exc}"))
        if not isinstance(msg, dict):
            return error_frame(
                error_data(WSErrorCode.VALIDATION_ERROR, "Invalid message: expected a JSON object")
            )
        request_id = msg.get("id")
        kind = msg.get("type")
        envelope = _ENVELOPES.get(kind) if isinstance(kind, str) else None
        if envelope is None:
            return error_frame(
                error_data(WSErrorCode.UNKNOWN_TYPE, f"Unknown message type: {kind}"), request_id
            )
        if not _plain_step(msg, request_id):  # the common frame skips the model
            try:
                envelope.model_validate(msg)
            except ValidationError as exc:
                return invalid_frame(exc, "message", request_id)
        if kind == "close":
            raise _Close(request_id)
        if request_id is None or not session.resumable:
            return await self._dispatch(session, kind, msg, request_id)
        return await self._dispatch_once(session, kind, msg, request_id)

    async def _dispatch_once(
        self, session: Session, kind: str, msg: dict[str, Any], request_id: Any
    ) -> str:
        """Answer a request id at most once; a repeat gets the stored (or pending) reply."""
        assert session.replies is not None and session.inflight is not None
        cached = session.replies.get(request_id)
        if cached is not None:
            return cached
        pending = session.inflight.get(request_id)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        session.inflight[request_id] = fut
        try:
            reply = await self._dispatch(session, kind, msg, request_id)
        except BaseException:
            session.inflight.pop(request_id, None)
            fut.cancel()  # a waiting duplicate re-raises CancelledError and gives up
            raise
        session.inflight.pop(request_id, None)
        session.replies[request_id] = reply
        while len(session.replies) > self.manager.config.replay_window:
            session.replies.popitem(last=False)
        if not fut.done():
            fut.set_result(reply)
        return reply

    async def _dispatch(
        self, session: Session, kind: str, msg: dict[str, Any], request_id: Any
    ) -> str:
        manager = self.manager
        try:
            if kind == "step":
                try:
                    action = deserialize_action(msg["data"], self.server.action_cls)
                except ValidationError as exc:
                    return invalid_frame(exc, "action", request_id)
                obs = await manager.step(session, action)
                return observation_frame(obs, request_id)
            if kind == "reset":
                obs = await manager.reset(session, msg.get("data") or {})
                return observation_frame(obs, request_id)
            if kind == "state":
                state = await manager.state(session)
                return _frame("state", state.model_dump(), request_id)
            # kind == "mcp"
            response = await self.server.mcp.handle(msg["data"], ws_session=session)
            return _frame("mcp", response, request_id)
        except ServerSideError as exc:
            return error_frame(exc.to_data(), request_id)
        except Exception as exc:  # a server bug must not end the connection
            logger.exception("Unexpected error handling %s in session %s", kind, session.id)
            return error_frame(
                error_data(WSErrorCode.SESSION_ERROR, f"Internal error: {exception_message(exc)}"),
                request_id,
            )
