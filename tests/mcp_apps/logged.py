"""The echo app behind an ASGI middleware that records every request and WebSocket frame.

`GET /_log` returns the records; `DELETE /_log` clears them. A record is
`{"scope": "http", "method", "path", "rpc": [JSON-RPC methods of a POST body]}` or
`{"scope": "websocket", "path", "event": "connect"}` /
`{"scope": "websocket", "path", "event": "frame", "type": <frame type>, "action": <step action
type>, "rpc": <tunnelled JSON-RPC method>}` for each frame the server receives.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from echo_env.server.app import app as echo_app

LOG: list[dict[str, Any]] = []


def _rpc_methods(body: bytes) -> list[str]:
    try:
        payload = json.loads(body)
    except ValueError:
        return []
    items = payload if isinstance(payload, list) else [payload]
    return [str(i.get("method")) for i in items if isinstance(i, dict)]


def _frame_record(path: str, message: Message) -> dict[str, Any]:
    record: dict[str, Any] = {"scope": "websocket", "path": path, "event": "frame"}
    raw = message.get("text")
    if raw is None:
        raw = (message.get("bytes") or b"").decode("utf-8", "replace")
    try:
        frame = json.loads(raw)
    except ValueError:
        return {**record, "type": None}
    if not isinstance(frame, dict):
        return {**record, "type": None}
    record["type"] = frame.get("type", frame.get("method"))
    data = frame.get("data")
    if frame.get("type") == "step" and isinstance(data, dict):
        record["action"] = data.get("type")
    if frame.get("type") == "mcp" and isinstance(data, dict):
        record["rpc"] = data.get("method")
    if "jsonrpc" in frame:  # WS /mcp carries raw JSON-RPC
        record["rpc"] = frame.get("method")
    return record


class RequestLog:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http" and scope["path"] == "/_log":
            await self._log_endpoint(scope, send)
            return
        if kind == "http":
            record: dict[str, Any] = {
                "scope": "http",
                "method": scope["method"],
                "path": scope["path"],
            }
            LOG.append(record)
            if scope["method"] == "POST":
                chunks = []
                while True:
                    message = await receive()
                    if message["type"] != "http.request":
                        break
                    chunks.append(message.get("body", b""))
                    if not message.get("more_body", False):
                        break
                body = b"".join(chunks)
                record["rpc"] = _rpc_methods(body) if scope["path"] == "/mcp" else []
                replayed = False

                async def replay() -> Message:
                    nonlocal replayed
                    if not replayed:
                        replayed = True
                        return {"type": "http.request", "body": body, "more_body": False}
                    return await receive()

                await self.app(scope, replay, send)
                return
        elif kind == "websocket":
            path = scope["path"]
            LOG.append({"scope": "websocket", "path": path, "event": "connect"})

            async def logged_receive() -> Message:
                message = await receive()
                if message["type"] == "websocket.receive":
                    LOG.append(_frame_record(path, message))
                return message

            await self.app(scope, logged_receive, send)
            return
        await self.app(scope, receive, send)

    async def _log_endpoint(self, scope: Scope, send: Send) -> None:
        if scope["method"] == "DELETE":
            LOG.clear()
        body = json.dumps(LOG).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})


app = RequestLog(echo_app)
