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
- **Playground.** With the `/web` playground on, its page (`/`, `/web`, `/web/...`: static files
  that hold no secret) answers without the key, and a socket opened by a page of this very
  server (its `Origin` names the host the request was sent to) is allowed. A browser cannot put
  a header on a WebSocket handshake, so the page sends the key as a subprotocol
  (`openenv.bearer.<base64url key>`), which is accepted in place of the header.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from openenv import settings

from ..protocol import CLOSE_POLICY, dumps
from .asgi import route_path

#: Routes that answer without credentials.
OPEN_PATHS = frozenset({"/health"})
#: With the playground on, these answer without credentials too (the page and its files).
PLAYGROUND_PATHS = frozenset({"/", "/web"})
PLAYGROUND_PREFIX = "/web/"
#: A browser's way to send the API key on a WebSocket handshake: a subprotocol of this prefix
#: followed by the key in unpadded base64url.
BEARER_SUBPROTOCOL_PREFIX = "openenv.bearer."


def bearer_subprotocol(api_key: str) -> str:
    """The subprotocol that carries `api_key` (what the playground page offers)."""
    encoded = base64.urlsafe_b64encode(api_key.encode()).decode().rstrip("=")
    return BEARER_SUBPROTOCOL_PREFIX + encoded


def _key_from_subprotocols(scope: Scope) -> bytes | None:
    for offered in scope.get("subprotocols") or ():
        if offered.startswith(BEARER_SUBPROTOCOL_PREFIX):
            encoded = offered[len(BEARER_SUBPROTOCOL_PREFIX) :]
            try:
                key = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
            except (binascii.Error, ValueError):
                return None
            return b"Bearer " + key
    return None


def api_key_from_env() -> str | None:
    return settings.API_KEY.get()


def allowed_origins_from_env() -> list[str]:
    return list(settings.ALLOWED_ORIGINS.get())


class AccessGuard:
    """ASGI middleware: refuses requests without the API key and sockets from foreign pages."""

    def __init__(
        self,
        app: ASGIApp,
        api_key: str | None,
        allowed_origins: Iterable[str] = (),
        playground: bool = False,
        open_paths: frozenset[str] = OPEN_PATHS,
    ) -> None:
        self.app = app
        self.open_paths = open_paths
        self.expected = f"Bearer {api_key}".encode() if api_key else None
        self.origins = {origin.rstrip("/").lower() for origin in allowed_origins}
        self.playground = playground

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        if kind == "websocket":
            origin = headers.get(b"origin")
            if origin is not None and not self._origin_allowed(origin.decode("latin-1"), headers):
                await self._refuse_socket(receive, send)
                return
        if self.expected is not None and not self._open_path(route_path(scope)):
            sent = headers.get(b"authorization", b"")
            if kind == "websocket" and not sent:
                sent = _key_from_subprotocols(scope) or b""
            if not secrets.compare_digest(sent, self.expected):
                if kind == "websocket":
                    await self._refuse_socket(receive, send)
                else:
                    await _unauthorized(send)
                return
        await self.app(scope, receive, send)

    def _open_path(self, path: str) -> bool:
        if path in self.open_paths:
            return True
        return self.playground and (path in PLAYGROUND_PATHS or path.startswith(PLAYGROUND_PREFIX))

    def _origin_allowed(self, origin: str, headers: dict[bytes, bytes]) -> bool:
        origin = origin.rstrip("/").lower()
        if "*" in self.origins or origin in self.origins:
            return True
        return self.playground and _same_origin(origin, headers)

    @staticmethod
    async def _refuse_socket(receive: Receive, send: Send) -> None:
        """Close before accepting: the client's handshake fails with HTTP 403."""
        message = await receive()
        if message["type"] == "websocket.connect":
            await send({"type": "websocket.close", "code": CLOSE_POLICY})


def _same_origin(origin: str, headers: dict[bytes, bytes]) -> bool:
    """The page that opens the socket was served by this server: its origin names the host the
    handshake was sent to (`X-Forwarded-Host` behind a proxy, which a page cannot set)."""
    origin_host = urlsplit(origin).netloc
    if not origin_host:
        return False
    hosts = [headers.get(b"host", b"")]
    forwarded = headers.get(b"x-forwarded-host")
    if forwarded:
        hosts.extend(part.strip() for part in forwarded.split(b","))
    return any(origin_host == host.decode("latin-1").lower() for host in hosts if host)


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
