"""The floor: a bare ASGI app that answers every WebSocket message and HTTP request with a fixed
observation-shaped reply, without parsing anything. Served with the same uvicorn settings as the
environment servers, it shows what the transport (uvicorn + its WebSocket/HTTP protocol) costs.

HTTP requests get an `X-OpenEnv-Session-Id` header so the HTTP-session measurement runs too.
"""

from __future__ import annotations

from typing import Any

WS_REPLY = (
    '{"type":"observation","data":{"observation":{"value":2,"metadata":{}},'
    '"reward":1.0,"done":false,"metadata":{}}}'
)
HTTP_REPLY = b'{"observation":{"value":2,"metadata":{}},"reward":1.0,"done":false,"metadata":{}}'
HTTP_HEADERS = [
    (b"content-type", b"application/json"),
    (b"x-openenv-session-id", b"floor"),
]


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    kind = scope["type"]
    if kind == "websocket":
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        reply = {"type": "websocket.send", "text": WS_REPLY}
        while True:
            message = await receive()
            if message["type"] != "websocket.receive":
                return
            await send(reply)
    elif kind == "http":
        more = True
        while more:
            message = await receive()
            more = message.get("more_body", False)
        await send({"type": "http.response.start", "status": 200, "headers": HTTP_HEADERS})
        await send({"type": "http.response.body", "body": HTTP_REPLY})
    elif kind == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
