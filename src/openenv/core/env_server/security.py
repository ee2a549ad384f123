"""Who may talk to a server: an optional bearer token, and which browser pages may open sockets.

- **API key.** With `OPENENV_API_KEY` (or `create_app(..., api_key=...)`) set, every HTTP route
  but `/health` and every WebSocket handshake needs `Authorization: Bearer <key>`; anything
  else gets 401 before it reaches a route. Clients send it from their `api_key` argument or the
  same variable. `/health` stays open so that liveness probes need no secret (it says nothing
  but "healthy"). `/metrics` (when on) needs the key too unless `OPENENV_METRICS_PUBLIC=1`.
- **Origin.** A WebSocket handshake that carries an `Origin` header comes from a browser page.
  Browsers do not apply CORS to WebSockets, so without a check any web page a user visits could
  drive a server on their machine. Handshakes are refused unless the origin is in
  `OPENENV_ALLOWED_ORIGINS` (comma-separated, `*` for any); programs send no `Origin` and are
  not affected.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

from ..protocol import dumps

#: Routes that answer without credentials.
OPEN_PATHS = frozenset({"/health"})


def api_key_from_env() -> str | None:
    return os.environ.get("OPENENV_API_KEY") or None


def allowed_origins_from_env() -> list[str]:
    raw = os.environ.get("OPENENV_ALLOWED_ORIGINS", "")
    return [item.strip().rstrip("/") for item in raw.split(",") if item.strip()]


class AccessGuard:
    """ASGI middleware: refuses requests without the API key and sockets from foreign pages."""

    def __init__(
        self,
        app: ASGIApp,
        api_key: str | None,
        allowed_origins: Iterable[str] = (),
        open_paths: frozenset[str] = OPEN_PATHS,
    ) -> None:
        self.app = app
        self.open_paths = open_paths
        self.expected = f"Bearer {api_key}".encode() if api_key else None
        self.origins = {origin.rstrip("/").lower() for origin in allowed_origins}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        if kind == "websocket":
            origin = headers.get(b"origin")
            if origin is not None and not self._origin_allowed(origin.decode("latin-1")):
                await self._refuse_socket(receive, send)
                return
        if self.expected is not None and scope["path"] not in self.open_paths:
            sent = headers.get(b"authorization", b"")
            if not secrets.compare_digest(sent, self.expected):
                if kind == "websocket":
                    await self._refuse_socket(receive, send)
                else:
                    await _unauthorized(send)
                return
        await self.app(scope, receive, send)

    def _origin_allowed(self, origin: str) -> bool:
        return "*" in self.origins or origin.rstrip("/").lower() in self.origins

    @staticmethod
    async def _refuse_socket(receive: Receive, send: Send) -> None:
        """Close before accepting: the client's handshake fails with HTTP 403."""
        message = await receive()
        if message["type"] == "websocket.connect":
            await send({"type": "websocket.close", "code": 1008})


async def _unauthorized(send: Send) -> None:
    body = dumps(
        {
            "detail": {
                "message": "Missing or wrong API key: send 'Authorization: Bearer <key>' "
                "(clients: api_key=... or OPENENV_API_KEY)",
                "code": "UNAUTHORIZED",
                "category": "client",
            }
        }
    )
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", b"Bearer"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
