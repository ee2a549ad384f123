"""Playground apps for the tests: the counter with an API key and a custom renderer, and the
same app behind a path prefix (as a proxy that strips `/space` and sets `root_path` serves it)."""

from __future__ import annotations

from pathlib import Path

from starlette.types import ASGIApp, Receive, Scope, Send

from openenv.core.env_server import create_app
from tests.apps.counter import CounterAction, CounterEnv, CounterObservation

KEY = "playground-key"
PREFIX = "/space"
RENDERER = Path(__file__).with_name("counter_renderer.js")

keyed = create_app(
    CounterEnv,
    CounterAction,
    CounterObservation,
    env_name="counter",
    api_key=KEY,
    web_interface=True,
    web_renderer=RENDERER,
)


def behind_prefix(app: ASGIApp, prefix: str) -> ASGIApp:
    async def proxied(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            path = scope["path"]
            if path == "/health":  # the test harness's readiness probe
                pass
            elif path == prefix or path.startswith(prefix + "/"):
                scope = {**scope, "root_path": prefix, "path": path[len(prefix) :] or "/"}
            else:
                scope = {**scope, "path": "/not-behind-the-prefix"}
        await app(scope, receive, send)

    return proxied


prefixed = behind_prefix(keyed, PREFIX)
