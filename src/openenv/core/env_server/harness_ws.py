"""The production-mode `/harness` WebSocket: talk to an environment's agent harness turn by turn.

On connect the server opens a session (within the server's session limit), resets it and sends
`{"type":"session_started","data":{...}}`. Each `{"type":"message","content":...}` runs one turn
and its `HarnessEvent` frames are sent as they happen, `turn_complete` last. A frame that is not
such a message gets a `protocol_error` reply and the connection stays usable. A failed turn
(harness crashed, turn timed out) sends a terminal `error` event and ends the session. The
access checks (API key, Origin) are the server's middleware, as for `/ws`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from starlette.websockets import WebSocket

from ..errors import ServerError, exception_message
from ..protocol import dumps
from .connections import close_websocket

if TYPE_CHECKING:
    from .http_server import HTTPEnvServer
    from .sessions import Session

logger = logging.getLogger("openenv.server")


def builds_harness_environment(env_class: Any) -> bool:
    """Whether the factory's class is a `HarnessEnvironment` (unknown counts: checked on
    connect)."""
    if env_class is None:
        return True
    from ..harness.environment import HarnessEnvironment

    return isinstance(env_class, type) and issubclass(env_class, HarnessEnvironment)


class HarnessSocket:
    def __init__(self, server: HTTPEnvServer) -> None:
        self.server = server
        self.manager = server.manager

    async def __call__(self, websocket: WebSocket) -> None:
        from ..harness.environment import HarnessAction, HarnessEnvironment

        await websocket.accept()
        try:
            session = await self.manager.create("ws")
        except ServerError as exc:
            await self._fail(websocket, exc.message, exc.to_data())
            return
        session.websocket = websocket
        try:
            if not isinstance(session.env, HarnessEnvironment):
                await self._fail(websocket, "this environment has no agent harness")
                return
            try:
                observation = await self.manager.reset(session, {})
            except ServerError as exc:
                await self._fail(websocket, f"the harness did not start: {exc.message}")
                return
            await self._send(
                websocket,
                {
                    "type": "session_started",
                    "data": {"session_id": session.id, **observation.metadata},
                },
            )
            await self._serve(websocket, session, HarnessAction)
        finally:
            session.websocket = None
            await self.manager.destroy(session, "harness connection closed")

    async def _serve(self, websocket: WebSocket, session: Session, action_cls: Any) -> None:
        from ..harness.environment import turn_event_sink
        from ..harness.events import HarnessClientMessage, HarnessEvent

        limit = self.manager.config.max_message_bytes
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            raw = message.get("text")
            if raw is None:
                raw = message.get("bytes") or b""
            if len(raw) > limit:
                await self._protocol_error(
                    websocket, f"message exceeds the limit of {limit} bytes", "MESSAGE_TOO_LARGE"
                )
                continue
            try:
                request = HarnessClientMessage.model_validate_json(raw)
            except ValidationError as exc:
                errors = "; ".join(
                    f"{'.'.join(str(p) for p in e['loc']) or 'message'}: {e['msg']}"
                    for e in exc.errors(include_url=False)
                )
                await self._protocol_error(
                    websocket,
                    'expected {"type": "message", "content": "..."}: ' + errors,
                    "INVALID_MESSAGE",
                )
                continue

            connected = True

            async def forward(event: HarnessEvent) -> None:
                nonlocal connected
                if connected:
                    try:
                        await websocket.send_text(dumps(event.model_dump(mode="json")).decode())
                    except Exception:
                        connected = False  # the turn still finishes; the session then ends

            token = turn_event_sink.set(forward)
            try:
                observation = await self.manager.step(session, action_cls(message=request.content))
            except ServerError as exc:
                await self._fail(websocket, exc.message, exc.to_data())
                return
            finally:
                turn_event_sink.reset(token)
            if not connected:
                return
            if "error_type" in observation.metadata:
                await close_websocket(websocket)  # its error event was the turn's last frame
                return

    async def _protocol_error(self, websocket: WebSocket, message: str, code: str) -> None:
        from ..harness.events import HarnessProtocolError

        frame = HarnessProtocolError(data={"message": message, "code": code})
        await self._send(websocket, frame.model_dump(mode="json"))

    async def _fail(
        self, websocket: WebSocket, message: str, details: dict[str, Any] | None = None
    ) -> None:
        """Send a terminal `error` event and close."""
        from ..harness.events import HarnessEvent, HarnessEventType

        data: dict[str, Any] = {"message": message, "recoverable": False}
        if details:
            data["details"] = details
        event = HarnessEvent(type=HarnessEventType.ERROR, data=data)
        await self._send(websocket, event.model_dump(mode="json"))
        await close_websocket(websocket)

    @staticmethod
    async def _send(websocket: WebSocket, payload: dict[str, Any]) -> None:
        try:
            await websocket.send_text(dumps(payload).decode())
        except Exception as exc:
            logger.debug("/harness: could not send a frame: %s", exception_message(exc))
