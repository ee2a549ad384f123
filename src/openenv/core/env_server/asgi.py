"""Small ASGI helpers shared by the middlewares."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Optional

from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket


class BodyTooLarge(Exception):
    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


async def read_body(receive: Receive, limit: Optional[int] = None) -> Optional[bytes]:
    """The whole request body; None if the client left; BodyTooLarge past `limit` bytes."""
    chunks: list[bytes] = []
    received = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk = message.get("body", b"")
        received += len(chunk)
        if limit is not None and received > limit:
            raise BodyTooLarge(received)
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


def replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that yields an already-read body once, then defers to the real one."""
    sent = False

    async def replayed() -> Any:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


def route_path(scope: Scope) -> str:
    """The path without the prefix a proxy or `root_path` put in front of it."""
    path: str = scope["path"]
    root = scope.get("root_path") or ""
    if root and path.startswith(root):
        path = path[len(root) :] or "/"
    return path


class DirectWebSocket(WebSocket):
    """A Starlette `WebSocket` whose `receive` and `send` are the server's own callables.

    Starlette's versions check the state of the connection on every message, one more
    coroutine frame each way; the handlers that get this class keep to the ASGI order
    themselves (accept first, nothing after close, no receive after a disconnect).
    """

    def __init__(self, scope: Scope, receive: Receive, send: Send) -> None:
        super().__init__(scope, receive, send)
        self.receive = receive  # type: ignore[method-assign,assignment]
        self.send = send  # type: ignore[method-assign,assignment]


WebSocketEndpoint = Callable[[WebSocket], Coroutine[Any, Any, None]]


class DirectWebSocketRoutes:
    """Serves the hottest WebSocket paths before the framework's middleware and router.

    Every message of a FastAPI WebSocket route is resumed through about fifteen frames (the
    exception middleware, the router, the route, FastAPI's session wrapper) and every reply
    passes Starlette's exception-tracking `send` wrapper. Those layers do nothing for these
    endpoints, which answer every error themselves; installed inside the access checks, this
    hands their sockets straight to the endpoint. The endpoint runs in a task of its own:
    resuming it after each await then no longer walks the middlewares' frames above it either.
    The routes stay registered on the app too (an app mounted inside another one still
    reaches them).
    """

    def __init__(self, app: ASGIApp, routes: Mapping[str, WebSocketEndpoint]) -> None:
        self.app = app
        self.routes = dict(routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            endpoint = self.routes.get(route_path(scope))
            if endpoint is not None:
                # (Cancelling this coroutine cancels the task it awaits.)
                work = endpoint(DirectWebSocket(scope, receive, send))
                await asyncio.get_running_loop().create_task(work)
                return
        await self.app(scope, receive, send)
