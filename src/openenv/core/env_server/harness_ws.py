"""The production-mode `/harness` WebSocket: talk to an environment's agent harness turn by turn.

On connect the server opens a session (within the server's session limit), resets it and sends
`{"type":"session_started","data":{...}}`. Each `{"type":"message","content":...}` runs one turn
and its `HarnessEvent` frames are sent as they happen, `turn_complete` last; messages sent
meanwhile are answered after it, in order, and a client that leaves mid-turn ends the session
(and its harness) at once. A frame that is not such a message gets a `protocol_error` reply and
the connection stays usable. A failed turn (harness crashed, turn timed out) sends a terminal
`error` event and ends the session. The access checks (API key, Origin) are the server's
middleware and the flood budget is `/ws`'s.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from starlette.websockets import WebSocket

from ..errors import ServerError, exception_message
from ..protocol import HarnessErrorCode, dumps
from .connections import close_websocket
from .flood import FrameBudget

if TYPE_CHECKING:
    from .http_server import HTTPEnvServer
    from .sessions import Session

logger = logging.getLogger("openenv.server")


def builds_harness_environment(env_class: Any) -> bool:
    """Whether the factory's class is a `HarnessEnvironment` (unknown counts: checked on
    connect)."""
    from ..harness.environment import HarnessEnvironment
    from .interfaces import Environment

    if not (isinstance(env_class, type) and issubclass(env_class, Environment)):
        return True  # not known (e.g. a function without a return annotation)
    return issubclass(env_class, HarnessEnvironment)


#: Frames a client may send while a turn runs, kept for after it.
_MAX_QUEUED = 64


def _describe(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'message'}: {e['msg']}"
        for e in exc.errors(include_url=False)
    )


class _Frames:
    """A connection's incoming frames: one receive in flight at most, and the frames that
    arrived while a turn ran (answered in order after it)."""

    def __init__(self, websocket: WebSocket) -> None:
        self.websocket = websocket
        self.queued: collections.deque[dict[str, Any]] = collections.deque()
        self.receiving: asyncio.Future[Any] | None = None

    def receiving_task(self) -> asyncio.Future[Any]:
        if self.receiving is None:
            self.receiving = asyncio.ensure_future(self.websocket.receive())
        return self.receiving

    def take(self, task: asyncio.Future[Any]) -> Any:
        self.receiving = None
        return task.result()

    def keep(self, message: dict[str, Any]) -> bool:
        if len(self.queued) >= _MAX_QUEUED:
            return False
        self.queued.append(message)
        return True

    async def next(self) -> Any:
        if self.queued:
            return self.queued.popleft()
        task = self.receiving_task()
        try:
            await asyncio.wait({task})
        finally:
            if not task.done():
                task.cancel()
                self.receiving = None
        return self.take(task)

    def cancel(self) -> None:
        if self.receiving is not None:
            self.receiving.cancel()
            self.receiving = None


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
        from ..harness.events import HarnessClientMessage

        limit = self.manager.config.max_message_bytes
        budget = FrameBudget(self.manager.config)
        frames = _Frames(websocket)
        try:
            while True:
                message = await frames.next()
                if message["type"] == "websocket.disconnect":
                    return
                raw = message.get("text")
                if raw is None:
                    raw = message.get("bytes") or b""
                size = len(raw.encode() if isinstance(raw, str) else raw)
                refused = True
                if size > limit:
                    await self._protocol_error(
                        websocket,
                        f"message of {size} bytes exceeds the limit of {limit} bytes",
                        HarnessErrorCode.MESSAGE_TOO_LARGE,
                    )
                else:
                    try:
                        request = HarnessClientMessage.model_validate_json(raw)
                    except ValidationError as exc:
                        await self._protocol_error(
                            websocket,
                            'expected {"type": "message", "content": "..."}: ' + _describe(exc),
                            HarnessErrorCode.INVALID_MESSAGE,
                        )
                    else:
                        refused = False
                        if not await self._turn(
                            websocket, session, frames, action_cls(message=request.content)
                        ):
                            return
                if not await budget.after_frame(websocket, size, refused):
                    return
        finally:
            frames.cancel()

    async def _turn(
        self, websocket: WebSocket, session: Session, frames: _Frames, action: Any
    ) -> bool:
        """Run one turn, its events sent as they happen; False: the connection is done."""
        from ..harness.environment import turn_event_sink
        from ..harness.events import HarnessEvent

        connected = True

        async def forward(event: HarnessEvent) -> None:
            nonlocal connected
            if connected:
                try:
                    await websocket.send_text(dumps(event.model_dump(mode="json")).decode())
                except Exception:
                    connected = False  # the turn still ends normally; then so does the session

        token = turn_event_sink.set(forward)
        try:  # the task takes the sink with it (a copy of this context)
            step = asyncio.ensure_future(self.manager.step(session, action))
        finally:
            turn_event_sink.reset(token)
        try:
            # Meanwhile notice a client that leaves (its harness need not run on for nobody),
            # and keep what it sends for after the turn.
            while not step.done():
                receiving = frames.receiving_task()
                await asyncio.wait({step, receiving}, return_when=asyncio.FIRST_COMPLETED)
                if receiving.done():
                    message = frames.take(receiving)
                    if message["type"] == "websocket.disconnect":
                        return False
                    if not frames.keep(message):
                        await self._protocol_error(
                            websocket,
                            f"more than {_MAX_QUEUED} messages sent while a turn runs",
                            HarnessErrorCode.TOO_MANY_MESSAGES,
                        )
            observation = step.result()
        except ServerError as exc:
            await self._fail(websocket, exc.message, exc.to_data())
            return False
        finally:
            if not step.done():
                step.cancel()
                with contextlib.suppress(BaseException):
                    await step
        if not connected:
            return False
        if "error_type" in observation.metadata:
            await close_websocket(websocket)  # its error event was the turn's last frame
            return False
        return True

    async def _protocol_error(
        self, websocket: WebSocket, message: str, code: HarnessErrorCode
    ) -> None:
        from ..harness.events import HarnessProtocolError

        frame = HarnessProtocolError(data={"message": message, "code": code.value})
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
