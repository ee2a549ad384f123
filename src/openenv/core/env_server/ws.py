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
import secrets
import time
from time import perf_counter
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from starlette.websockets import WebSocket

from ..errors import (
    CapacityReachedError,
    InvalidRequestError,
    ServerError,
    SessionLostError,
    exception_message,
)
from ..protocol import (
    BINARY_MAGIC,
    BINARY_SUBPROTOCOL,
    CLOSE_TAKEN_OVER,
    EXTENDED_SUBPROTOCOLS,
    RESUME_TOKEN_HEADER,
    EncodedReply,
    Rejected,
    Request,
    WSErrorCode,
    decode_request,
    encode_closed,
    encode_error,
    encode_error_data,
    encode_mcp,
    encode_session,
    encode_state,
    error_category,
    invalid_data,
    session_id_from_scope,
)
from .connections import close_websocket, close_websocket_soon
from .flood import FrameBudget
from .serialization import deserialize_action, encode_observation_reply
from .sessions import Session

if TYPE_CHECKING:
    from .http_server import HTTPEnvServer

logger = logging.getLogger("openenv.server")

_TRUE = frozenset({"1", "true", "yes", "on"})


def _text(frame: bytes) -> str:
    return frame.decode()


class _Close(Exception):
    """The client asked to end the session."""

    def __init__(self, request_id: Any) -> None:
        self.request_id = request_id


class WebSocketHandler:
    def __init__(self, server: HTTPEnvServer) -> None:
        self.server = server
        self.manager = server.manager
        self.metrics = server.manager.metrics

    async def __call__(self, websocket: WebSocket) -> None:
        offered = websocket.scope.get("subprotocols", ())
        chosen = next((p for p in EXTENDED_SUBPROTOCOLS if p in offered), None)
        extended = chosen is not None
        await websocket.accept(subprotocol=chosen)
        binary = chosen == BINARY_SUBPROTOCOL
        params = websocket.query_params
        session: Session | None = None
        early: list[Any] = []  # frames (or a pending receive) that arrived while queued
        try:
            requested = session_id_from_scope(websocket.scope)
            if requested:
                session = await self._attach(websocket, requested, extended)
            else:
                try:
                    session = await self._create_watching(websocket, early)
                except ServerError as exc:
                    await self._refuse(websocket, exc.to_data())
                    return
                if session is None:
                    return  # the client left while waiting for a slot
                session.websocket = websocket
                if extended or params.get("resumable", "").lower() in _TRUE:
                    await self._announce(websocket, session, resumed=False)
            if session is None:
                return
            await self._serve(websocket, session, early, binary)
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
                        raise CapacityReachedError(
                            "Too many messages sent while waiting for a slot"
                        )
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
        if self.metrics is not None:
            self.metrics.error(str(data.get("code", "")), str(data.get("category", "")))
        try:
            await websocket.send_text(_text(encode_error_data(data)))
        except Exception:
            return
        await close_websocket(websocket)

    async def _attach(
        self, websocket: WebSocket, session_id: str, extended: bool
    ) -> Session | None:
        try:
            session = self.manager.get(session_id)
            if session.transport == "ws" and not _token_matches(websocket, session):
                # Answered as unknown: a guessed or leaked id learns nothing.
                raise SessionLostError(f"Unknown session_id: {session_id}")
        except SessionLostError as exc:
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
        if self.metrics is not None:
            self.metrics.sessions_resumed.inc()
        if previous is not None and previous is not websocket:
            # The old connection is presumably dead (the client came back); it loses the session.
            # Closed on its own task: a half-open or non-reading old connection cannot delay
            # the new one.
            close_websocket_soon(previous, CLOSE_TAKEN_OVER, "session resumed elsewhere")
        if extended or session.resumable:
            await self._announce(websocket, session, resumed=True)
        return session

    async def _announce(self, websocket: WebSocket, session: Session, resumed: bool) -> None:
        session.make_resumable()
        config = self.manager.config
        frame = encode_session(
            session.id,
            resumed=resumed,
            resume_grace_s=config.resume_grace_s,
            session_timeout_s=config.session_timeout,
            step_count=session.step_count,
            resume_token=session.resume_token,
        )
        await websocket.send_text(_text(frame))

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

    async def _serve(
        self, websocket: WebSocket, session: Session, early: list[Any], binary: bool
    ) -> None:
        # The connection's own callables, bound once: a reply is one `send` of an ASGI message.
        receive = websocket.receive
        send = websocket.send
        config = self.manager.config
        limit = config.max_message_bytes
        budget = FrameBudget(config, websocket)
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
            if session.websocket is not websocket or (
                session.closed and session.call_timed_out is None
            ):
                return  # (a session ended by a hung call answers why, below)
            size = len(raw)
            if isinstance(raw, str) and limit >= size and size * 4 > limit and not raw.isascii():
                size = len(raw.encode())  # characters > limit already means bytes > limit
            if size > limit:
                reply: bytes | None = encode_error(
                    WSErrorCode.MESSAGE_TOO_LARGE,
                    f"Message of {size} bytes exceeds the limit of {limit} bytes",
                    limit=limit,
                )
                refused = True
                if self.metrics is not None:
                    code = WSErrorCode.MESSAGE_TOO_LARGE.value
                    self.metrics.error(code, error_category(code).value)
            else:
                try:
                    reply, refused = await self._handle(session, raw, binary)
                except _Close as close:
                    # This connection says goodbye itself, after the session is gone.
                    session.websocket = None
                    await self.manager.destroy(session, "closed by client")
                    if close.request_id is not None:
                        try:
                            frame = encode_closed(close.request_id)
                            await websocket.send_text(_text(frame))
                        except Exception:
                            pass
                    await close_websocket(websocket)
                    return
            if reply is not None:
                try:
                    if reply.startswith(BINARY_MAGIC):  # (replies are bytes: no type check)
                        await send({"type": "websocket.send", "bytes": reply})
                    else:
                        await send({"type": "websocket.send", "text": reply.decode()})
                except Exception:
                    return  # the outcome stays stored for a resumed connection
            if not await budget.after_frame(websocket, size, refused):
                return

    async def _handle(
        self, session: Session, raw: str | bytes, binary: bool = False
    ) -> tuple[bytes | None, bool]:
        """The reply to one frame, and whether the frame was refused as invalid. With `binary`
        (the connection negotiated `openenv.v1.bin`) an observation holding bytes or arrays is
        a binary frame."""
        metrics = self.metrics
        started = perf_counter() if metrics is not None else 0.0
        request = decode_request(raw)
        if isinstance(request, Rejected):
            if metrics is not None:
                metrics.error_frame(request.frame)
            return request.frame, True
        if request.kind == "close":
            raise _Close(request.id)
        rid = request.id
        try:
            if rid is not None and session.resumable:
                # A re-sent request gets the outcome kept (the encoded reply, measured in
                # bytes), or waits for the one running: it is not applied again.
                replay = session.replay or self.manager.replay_store(session)
                if not replay.begin(rid):
                    return (await replay.outcome(rid)).frame(rid, binary), False
                try:
                    reply = self._reply(request.kind, await self._run(session, request), binary)
                except BaseException as exc:
                    replay.finish(rid, exc)
                    raise
                replay.finish(rid, reply)
                return reply.frame(rid, binary), False
            result = await self._run(session, request)
            return self._reply(request.kind, result, binary).frame(rid, binary), False
        except InvalidRequestError as exc:
            if metrics is not None:
                metrics.error(exc.code, exc.category)
            return encode_error_data(exc.to_data(), rid), True
        except ServerError as exc:
            if metrics is not None:
                metrics.error(exc.code, exc.category)
            return encode_error_data(exc.to_data(), rid), False
        except Exception as exc:  # a server bug must not end the connection
            logger.exception("Unexpected error handling a %s request", request.kind)
            if metrics is not None:
                code = WSErrorCode.SESSION_ERROR.value
                metrics.error(code, error_category(code).value)
            return encode_error(
                WSErrorCode.SESSION_ERROR, f"Internal error: {exception_message(exc)}", rid
            ), False
        finally:
            if metrics is not None:
                metrics.request(request.kind, perf_counter() - started, session)

    async def _run(self, session: Session, request: Request) -> Any:
        manager = self.manager
        kind, data = request.kind, request.data
        if kind == "step":
            assert data is not None
            try:
                action = deserialize_action(data, self.server.action_cls)
            except ValidationError as exc:
                raise InvalidRequestError(
                    "Invalid message", data=invalid_data(exc, "action")
                ) from None
            return await manager.step(session, action, request.options)
        if kind == "reset":
            return await manager.reset(session, data or {})
        if kind == "state":
            return await manager.state(session)
        assert data is not None  # kind == "mcp"
        return await self.server.mcp.handle(data, ws_session=session)

    @staticmethod
    def _reply(kind: str, result: Any, binary: bool = False) -> EncodedReply:
        """The encoded reply to a request of `kind` that returned `result`; its frame is
        `.frame(request_id, binary)`, and a session keeps it for a re-sent request."""
        if kind in ("step", "reset"):
            return encode_observation_reply(result, binary)
        if kind == "state":
            return encode_state(result.model_dump())
        return encode_mcp(result)


def _token_matches(websocket: WebSocket, session: Session) -> bool:
    """A WebSocket session is resumed only with the token its connection was given."""
    sent = websocket.headers.get(RESUME_TOKEN_HEADER, "")
    expected = session.resume_token
    if not expected:
        return False
    return secrets.compare_digest(sent.encode(), expected.encode())
