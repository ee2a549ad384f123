"""Every HTTP error reply is a JSON body of the protocol, never a plain-text page.

- Request bodies are read with the same strict JSON decoder as WebSocket frames (no NaN or
  Infinity, at most 1024 levels deep), so both transports accept the same documents.
- A body that is not such JSON, or fails its model, is 422 with FastAPI's (and OpenEnv's) list
  of field errors (`json_invalid` for bad JSON), each input cut to a short excerpt so that a
  huge or deeply nested value cannot break the reply.
- Anything unexpected is a 500 with a typed `SESSION_ERROR` body (category infrastructure).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exception_handlers import request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

from ..errors import exception_message
from ..protocol import WSErrorCode, dumps, error_data, field_errors, loads

logger = logging.getLogger("openenv.server")


class _StrictJSONRequest(Request):
    """A request whose `json()` is the protocol's decoder (orjson): NaN, Infinity and nesting
    deeper than 1024 levels are refused as invalid JSON instead of reaching the models."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = loads(await self.body())
        return self._json


class StrictJSONRoute(APIRoute):
    """An APIRoute that hands its endpoint a `_StrictJSONRequest` and answers an unexpected
    error itself (typed 500) rather than letting it reach the server's last-resort handler,
    which closes the connection after its reply."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        path = self.path  # the template: logs never carry the ids a request names

        async def route(request: Request) -> Response:
            try:
                return await handler(_StrictJSONRequest(request.scope, request.receive))
            except (HTTPException, RequestValidationError):
                raise  # the app's handlers answer these
            except Exception as exc:
                logger.exception("Unexpected error in %s %s", request.method, path)
                return await unexpected_error(request, exc)

        return route


@contextlib.contextmanager
def strict_json_routes(app: FastAPI) -> Iterator[None]:
    """Routes added to `app` inside the block read their bodies strictly (an app whose router
    has a route class of its own keeps it)."""
    router = app.router
    if router.route_class is not APIRoute:
        yield
        return
    router.route_class = StrictJSONRoute
    try:
        yield
    finally:
        router.route_class = APIRoute


def json_error(code: WSErrorCode, message: str, status: int, **extra: Any) -> Response:
    return Response(
        dumps({"detail": error_data(code, message, **extra)}),
        status_code=status,
        media_type="application/json",
    )


async def request_validation_error(request: Request, exc: Exception) -> Response:
    """422 with the list of field errors, as FastAPI (and OpenEnv) answer; a body that is not
    JSON is one `json_invalid` error (excerpts keep a huge or deep input from breaking it)."""
    assert isinstance(exc, RequestValidationError)
    return Response(
        dumps({"detail": field_errors(exc.errors())}),
        status_code=422,
        media_type="application/json",
    )


async def unexpected_error(request: Request, exc: Exception) -> Response:
    """Last resort: a server bug still answers with a typed body (the server logs it)."""
    return json_error(WSErrorCode.SESSION_ERROR, f"Internal error: {exception_message(exc)}", 500)


def install_error_handlers(app: FastAPI) -> None:
    """Answer request validation failures and unexpected errors with typed JSON bodies (an
    app that already handles one of them itself keeps its own handler)."""
    current = app.exception_handlers.get(RequestValidationError)
    if current is None or current is request_validation_exception_handler:
        app.add_exception_handler(RequestValidationError, request_validation_error)
    if Exception not in app.exception_handlers and 500 not in app.exception_handlers:
        app.add_exception_handler(Exception, unexpected_error)
