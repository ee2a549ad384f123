"""The capture proxy: records every model call a harness makes, on its way to the trainer's
model endpoint.

A harness (Claude Code, mini-swe-agent, any OpenAI or Anthropic client) is pointed at the proxy
as its model API; its API key is the capture session id, so calls from many concurrent
episodes land in the right place. The proxy forwards each call upstream non-streaming (asking
an OpenAI-compatible server such as vLLM for token ids and logprobs at capture level
``tokens``), records it as a `ModelCall`, and answers the harness in its own dialect -- as
server-sent events when it asked to stream. An upstream failure reaches the harness as an
HTTP error of its dialect and is recorded as such: the proxy never makes up a completion.
"""

from __future__ import annotations

import argparse
import contextlib
import hmac
import ipaddress
import logging
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from openenv import settings
from openenv.core.harness.capture.dialects import (
    APIType,
    Completion,
    anthropic_request_to_openai,
    anthropic_sse,
    detect,
    error_body,
    openai_request_to_anthropic,
    openai_sse,
    parse_anthropic_response,
    parse_openai_response,
    rough_token_count,
    to_anthropic_message,
    to_anthropic_stop_reason,
    to_openai_chat_completion,
    to_openai_finish_reason,
)
from openenv.core.harness.capture.serving import BackgroundServing, ThreadedServer
from openenv.core.harness.events import HarnessEvent, HarnessEventType
from openenv.core.llm_client import (
    AnthropicClient,
    HTTPChatClient,
    LLMError,
    LLMStatusError,
    OpenAIClient,
    to_openai_tool,
)

__all__ = ["CaptureLevel", "CaptureServer", "ModelCall", "UpstreamError", "create_app", "main"]

logger = logging.getLogger(__name__)

CaptureLevel = Literal["tokens", "logprobs", "text"]
_CAPTURE_LEVELS = ("tokens", "logprobs", "text")
#: The session of keyless calls when sessions need not be registered.
DEFAULT_SESSION = "default"
_PROXIED = (APIType.OPENAI_CHAT, APIType.ANTHROPIC)
_UPSTREAM_PATHS = {APIType.OPENAI_CHAT: "/v1/chat/completions", APIType.ANTHROPIC: "/v1/messages"}


class UpstreamError(RuntimeError):
    """The model endpoint behind the proxy failed (unreachable, HTTP error, malformed reply)."""

    def __init__(self, message: str, *, status_code: int = 502) -> None:
        super().__init__(message)
        self.status_code = status_code


@dataclass
class ModelCall:
    """One model call made through the proxy.

    ``request_messages`` and ``tools`` are in OpenAI chat format whatever the harness spoke
    (``dialect`` says what it spoke); token ids and logprobs are the upstream's when it returned
    them. A failed call has ``error`` set and no response.
    """

    session_id: str
    dialect: str
    request_messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    model: str | None = None
    response_text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    stop_reason: str | None = None
    started_at: float = 0.0
    duration_s: float = 0.0
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    error: str | None = None
    status_code: int = 200
    streamed: bool = False
    upstream_dialect: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_harness_events(self) -> list[HarnessEvent]:
        """The call as ``llm_request`` + ``llm_response`` (or ``error``) harness events."""
        request = HarnessEvent(
            type=HarnessEventType.LLM_REQUEST,
            timestamp=self.started_at,
            data={"messages": self.request_messages, "model": self.model, "tools": self.tools},
        )
        finished = self.started_at + self.duration_s
        if self.error is not None:
            failure = {"message": self.error, "recoverable": True, "status_code": self.status_code}
            return [
                request,
                HarnessEvent(type=HarnessEventType.ERROR, timestamp=finished, data=failure),
            ]
        response = HarnessEvent(
            type=HarnessEventType.LLM_RESPONSE,
            timestamp=finished,
            data={
                "content": self.response_text,
                "tool_calls": self.tool_calls,
                "usage": self.usage,
                "stop_reason": self.stop_reason,
            },
        )
        return [request, response]


class _Captures:
    """Sessions and their recorded calls, shared by the proxy's thread and its owner."""

    def __init__(self, on_call: Callable[[ModelCall], None] | None) -> None:
        self.on_call = on_call
        self._lock = threading.Lock()
        self._registered: set[str] = set()
        self._calls: dict[str, list[ModelCall]] = {}
        self._counts: dict[str, int] = {}

    def register(self, session_id: str) -> None:
        if not session_id:
            raise ValueError("a session id must be a non-empty string")
        with self._lock:
            self._registered.add(session_id)
            self._calls.setdefault(session_id, [])

    def unregister(self, session_id: str) -> None:
        with self._lock:
            self._registered.discard(session_id)

    def is_registered(self, session_id: str) -> bool:
        with self._lock:
            return session_id in self._registered

    def sessions(self) -> list[str]:
        with self._lock:
            return sorted(self._registered | set(self._calls))

    def reserve(self, session_id: str, limit: int) -> bool:
        """Count one more call for the session; False when it would exceed ``limit``."""
        with self._lock:
            count = self._counts.get(session_id, 0)
            if limit and count >= limit:
                return False
            self._counts[session_id] = count + 1
            return True

    def record(self, call: ModelCall) -> None:
        with self._lock:
            self._calls.setdefault(call.session_id, []).append(call)
        if self.on_call is not None:
            try:
                self.on_call(call)
            except Exception:
                logger.exception("the capture on_call hook failed; the call is still recorded")

    def calls(self, session_id: str) -> list[ModelCall]:
        with self._lock:
            return list(self._calls.get(session_id, []))

    def drain(self, session_id: str) -> list[ModelCall]:
        with self._lock:
            calls = self._calls.get(session_id, [])
            self._calls[session_id] = []
            return calls


def _session_key(request: Request) -> str | None:
    authorization = request.headers.get("authorization", "")
    if authorization[:7].lower() == "bearer " and authorization[7:].strip():
        return authorization[7:].strip()
    for header in ("x-api-key", "x-goog-api-key"):
        value = request.headers.get(header)
        if value:
            return value.strip()
    return None


def _is_loopback(request: Request) -> bool:
    if request.client is None:  # a Unix socket: only reachable from this machine
        return True
    try:
        return ipaddress.ip_address(request.client.host).is_loopback
    except ValueError:
        return False


class _Proxy:
    def __init__(
        self,
        *,
        llm_url: str,
        model: str | None,
        require_registered: bool,
        max_output_tokens: int,
        api_key: str | None,
        capture_level: str,
        admin_key: str | None,
        max_model_calls: int,
        upstream_api: str,
        upstream_timeout_s: float,
        upstream_retries: int,
        captures: _Captures,
    ) -> None:
        if capture_level not in _CAPTURE_LEVELS:
            raise ValueError(
                f"capture_level must be one of {_CAPTURE_LEVELS}, got {capture_level!r}"
            )
        if upstream_api not in ("auto", APIType.OPENAI_CHAT.value, APIType.ANTHROPIC.value):
            raise ValueError("upstream_api must be 'auto', 'openai_chat' or 'anthropic'")
        if not llm_url:
            raise ValueError("llm_url is required (the model endpoint to forward to)")
        self.llm_url = llm_url.rstrip("/")
        self.model = model
        self.require_registered = require_registered
        self.max_output_tokens = max_output_tokens
        self.capture_level = capture_level
        self.admin_key = admin_key
        self.max_model_calls = max_model_calls
        self.upstream_api = upstream_api
        self.captures = captures
        self._tokens_supported = True
        self._anthropic_upstream_missing = False
        options: dict[str, Any] = {
            "model": model or "upstream",
            "api_key": api_key,
            "timeout_s": upstream_timeout_s,
            "max_retries": upstream_retries,
        }
        # The LLM clients' retry and error classification, reused for raw bodies.
        self._clients: dict[APIType, HTTPChatClient] = {
            APIType.OPENAI_CHAT: OpenAIClient(self.llm_url, **options),
            APIType.ANTHROPIC: AnthropicClient(self.llm_url, **options),
        }

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()

    # -- routes ------------------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "healthy", "capture_level": self.capture_level})

    async def models(self, request: Request) -> Response:
        name = self.model or "upstream"
        entry = {
            "id": name,
            "object": "model",
            "type": "model",
            "created": 0,
            "created_at": "2025-01-01T00:00:00Z",
            "owned_by": "openenv",
            "display_name": name,
        }
        return JSONResponse(
            {
                "object": "list",
                "data": [entry],
                "has_more": False,
                "first_id": name,
                "last_id": name,
            }
        )

    def _admin_allowed(self, request: Request) -> bool:
        if self.admin_key:
            given = (
                request.headers.get("x-admin-key") or (request.headers.get("authorization", "")[7:])
            )
            return hmac.compare_digest(given.encode(), self.admin_key.encode())
        return _is_loopback(request)

    async def session_calls(self, request: Request) -> Response:
        if not self._admin_allowed(request):
            return JSONResponse({"error": "admin key required"}, status_code=403)
        session_id = request.path_params["session_id"]
        calls = self.captures.calls(session_id)
        return JSONResponse({"session_id": session_id, "calls": [c.to_dict() for c in calls]})

    async def register(self, request: Request) -> Response:
        if not self._admin_allowed(request):
            return JSONResponse({"error": "admin key required"}, status_code=403)
        try:
            body = await request.json()
            self.captures.register(str(body["session_id"]))
        except (ValueError, KeyError, TypeError):
            return JSONResponse({"error": 'expected {"session_id": "..."}'}, status_code=400)
        return JSONResponse({"session_id": body["session_id"]}, status_code=201)

    async def unregister(self, request: Request) -> Response:
        if not self._admin_allowed(request):
            return JSONResponse({"error": "admin key required"}, status_code=403)
        self.captures.unregister(request.path_params["session_id"])
        return Response(status_code=204)

    async def proxy(self, request: Request) -> Response:
        path = "/" + request.path_params.get("path", "")
        try:
            body = await request.json()
        except ValueError:
            body = None
        dialect = detect(path, request.headers, body)
        if not isinstance(body, dict):
            return _error(dialect, 400, "request body must be a JSON object")
        if dialect not in _PROXIED:
            return _error(dialect, 404, f"the {dialect.value} API is not supported by this proxy")
        if "messages" not in body:
            # e.g. a harness's telemetry post: not a model call, so nothing to forward.
            return _error(dialect, 404, f"{path} is not a model call this proxy forwards")
        session_id = _session_key(request)
        if session_id is None and not self.require_registered:
            session_id = DEFAULT_SESSION
        if session_id is None or (
            self.require_registered and not self.captures.is_registered(session_id)
        ):
            # Never echo the key: it may be a real credential sent here by mistake.
            return _error(dialect, 401, "unknown capture session (the API key is the session id)")
        if path.rstrip("/").endswith("/count_tokens"):
            counted = {k: body.get(k) for k in ("system", "messages", "tools") if body.get(k)}
            return JSONResponse({"input_tokens": rough_token_count(counted)})
        try:
            normalized = anthropic_request_to_openai(body) if dialect is APIType.ANTHROPIC else body
            tools = [to_openai_tool(t) for t in normalized.get("tools") or []]
            messages = [dict(m) for m in normalized.get("messages") or []]
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            return _error(dialect, 400, f"malformed {dialect.value} request: {exc!r}")
        if not self.captures.reserve(session_id, self.max_model_calls):
            message = f"this session used its {self.max_model_calls} model calls"
            return _error(dialect, 403, message)
        record = ModelCall(
            session_id=session_id,
            dialect=dialect.value,
            request_messages=messages,
            tools=tools,
            model=body.get("model"),
            started_at=time.time(),
            streamed=bool(body.get("stream")),
        )
        return await self._forward(dialect, record, body, request.headers)

    # -- forwarding ------------------------------------------------------------------------------

    def _upstream_dialect(self, dialect: APIType) -> APIType:
        if self.upstream_api != "auto":
            return APIType(self.upstream_api)
        if dialect is APIType.ANTHROPIC and self._anthropic_upstream_missing:
            return APIType.OPENAI_CHAT
        return dialect

    def _upstream_body(
        self, dialect: APIType, upstream: APIType, body: Mapping[str, Any]
    ) -> dict[str, Any]:
        if upstream is dialect:
            converted = dict(body)
        elif upstream is APIType.OPENAI_CHAT:
            converted = anthropic_request_to_openai(body)
        else:
            converted = openai_request_to_anthropic(body)
        for key in ("stream", "stream_options"):
            converted.pop(key, None)
        if self.model:
            converted["model"] = self.model
        if self.max_output_tokens:
            for key in ("max_tokens", "max_completion_tokens"):
                if isinstance(converted.get(key), int):
                    converted[key] = min(converted[key], self.max_output_tokens)
        if upstream is APIType.OPENAI_CHAT and self.capture_level != "text":
            converted["logprobs"] = True
            converted["top_logprobs"] = 0
            if self.capture_level == "tokens" and self._tokens_supported:
                converted["return_token_ids"] = True
        return converted

    async def _call_upstream(
        self, upstream: APIType, body: dict[str, Any], headers: Mapping[str, str]
    ) -> tuple[dict[str, Any], Completion]:
        """The upstream's reply body and its parsed form."""
        client = self._clients[upstream]
        forwarded: dict[str, str] = {}
        if upstream is APIType.ANTHROPIC:
            forwarded = {
                k: headers[k] for k in ("anthropic-version", "anthropic-beta") if k in headers
            }
        try:
            data = await client._post(_UPSTREAM_PATHS[upstream], body, forwarded)
        except LLMStatusError as exc:
            if exc.status_code == 400 and "return_token_ids" in body and "token_ids" in exc.body:
                # A server other than vLLM may refuse the token-ids flag: go on without it.
                self._tokens_supported = False
                retry = {k: v for k, v in body.items() if k != "return_token_ids"}
                return await self._call_upstream(upstream, retry, headers)
            raise UpstreamError(str(exc), status_code=exc.status_code) from exc
        except LLMError as exc:
            raise UpstreamError(str(exc)) from exc
        try:
            if upstream is APIType.ANTHROPIC:
                return data, parse_anthropic_response(data)
            return data, parse_openai_response(data)
        except (ValueError, TypeError, AttributeError) as exc:
            raise UpstreamError(f"the model endpoint sent a malformed reply: {exc}") from exc

    async def _forward(
        self, dialect: APIType, record: ModelCall, body: dict[str, Any], headers: Mapping[str, str]
    ) -> Response:
        started = time.monotonic()
        upstream = self._upstream_dialect(dialect)
        try:
            try:
                raw, completion = await self._call_upstream(
                    upstream, self._upstream_body(dialect, upstream, body), headers
                )
            except UpstreamError as exc:
                if not (
                    self.upstream_api == "auto"
                    and upstream is APIType.ANTHROPIC
                    and exc.status_code in (404, 405)
                ):
                    raise
                # The upstream has no Messages API: convert to chat completions from now on.
                self._anthropic_upstream_missing = True
                upstream = APIType.OPENAI_CHAT
                raw, completion = await self._call_upstream(
                    upstream, self._upstream_body(dialect, upstream, body), headers
                )
        except UpstreamError as exc:
            status = exc.status_code if 400 <= exc.status_code < 500 else 502
            record.upstream_dialect = upstream.value
            record.error = str(exc)
            record.status_code = status
            record.duration_s = time.monotonic() - started
            self.captures.record(record)
            return _error(dialect, status, f"model endpoint failed: {exc}")
        record.upstream_dialect = upstream.value
        record.duration_s = time.monotonic() - started
        record.response_text = completion.text
        record.tool_calls = [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in completion.tool_calls
        ]
        record.usage = {
            "prompt_tokens": completion.prompt_tokens,
            "completion_tokens": completion.completion_tokens,
        }
        record.stop_reason = (
            to_anthropic_stop_reason(completion)
            if dialect is APIType.ANTHROPIC
            else to_openai_finish_reason(completion)
        )
        record.prompt_token_ids = completion.prompt_token_ids
        record.completion_token_ids = completion.token_ids
        record.logprobs = completion.logprobs
        self.captures.record(record)
        if upstream is dialect and not body.get("stream"):
            return JSONResponse(raw)  # as the upstream sent it: nothing the harness asked is lost
        if body.get("model"):
            completion.model = str(body["model"])
        if body.get("stream"):
            events: Iterator[str]
            if dialect is APIType.ANTHROPIC:
                events = anthropic_sse(completion)
            else:
                options = body.get("stream_options") or {}
                events = openai_sse(completion, include_usage=bool(options.get("include_usage")))
            return StreamingResponse(_aiter(events), media_type="text/event-stream")
        if dialect is APIType.ANTHROPIC:
            return JSONResponse(to_anthropic_message(completion))
        return JSONResponse(to_openai_chat_completion(completion))


async def _aiter(events: Iterator[str]) -> AsyncIterator[str]:
    for event in events:
        yield event


def _error(dialect: APIType, status: int, message: str) -> JSONResponse:
    return JSONResponse(error_body(dialect, status, message), status_code=status)


def create_app(
    *,
    llm_url: str = "",
    model: str | None = None,
    require_registered: bool = True,
    max_output_tokens: int = 8192,
    api_key: str | None = None,
    capture_level: CaptureLevel | str = "tokens",
    admin_key: str | None = None,
    max_model_calls: int = 0,
    upstream_api: str = "auto",
    upstream_timeout_s: float = 600.0,
    upstream_retries: int = 2,
    on_call: Callable[[ModelCall], None] | None = None,
    captures: _Captures | None = None,
) -> Starlette:
    """The proxy as an ASGI app (``app.state.captures`` holds the sessions and their calls).

    ``upstream_api`` is the dialect spoken to ``llm_url``: ``auto`` forwards in the harness's
    dialect (switching to chat completions if the upstream has no ``/v1/messages``);
    ``openai_chat`` or ``anthropic`` converts every call to that one. ``api_key`` is sent
    upstream (the harness's key is its session id and is never forwarded). ``max_model_calls``
    > 0 caps the calls per session.
    """
    state = captures if captures is not None else _Captures(on_call)
    proxy = _Proxy(
        llm_url=llm_url,
        model=model,
        require_registered=require_registered,
        max_output_tokens=max_output_tokens,
        api_key=api_key,
        capture_level=capture_level,
        admin_key=admin_key,
        max_model_calls=max_model_calls,
        upstream_api=upstream_api,
        upstream_timeout_s=upstream_timeout_s,
        upstream_retries=upstream_retries,
        captures=state,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await proxy.aclose()

    app = Starlette(
        routes=[
            Route("/health", proxy.health, methods=["GET"]),
            Route("/v1/models", proxy.models, methods=["GET"]),
            Route("/models", proxy.models, methods=["GET"]),
            Route("/sessions", proxy.register, methods=["POST"]),
            Route("/sessions/{session_id}", proxy.unregister, methods=["DELETE"]),
            Route("/sessions/{session_id}/calls", proxy.session_calls, methods=["GET"]),
            Route("/{path:path}", proxy.proxy, methods=["POST"]),
        ],
        lifespan=lifespan,
    )
    app.state.captures = state
    return app


class CaptureServer(BackgroundServing):
    """The capture proxy served from a background thread (TCP, plus a Unix socket if ``uds``).

    ```python
    with CaptureServer(llm_url="http://vllm:8000") as capture:
        capture.register_session("episode-1")
        # harness: base URL capture.url, API key "episode-1"
        calls = capture.drain("episode-1")
    ```
    Other keyword arguments are `create_app`'s.
    """

    def __init__(
        self,
        *,
        llm_url: str,
        model: str | None = None,
        port: int = 0,
        host: str = "127.0.0.1",
        api_key: str | None = None,
        capture_level: CaptureLevel | str = "tokens",
        require_registered: bool = True,
        uds: str | None = None,
        on_call: Callable[[ModelCall], None] | None = None,
        **options: Any,
    ) -> None:
        self._captures = _Captures(on_call)
        self.app = create_app(
            llm_url=llm_url,
            model=model,
            api_key=api_key,
            capture_level=capture_level,
            require_registered=require_registered,
            captures=self._captures,
            **options,
        )
        self.uds = uds
        self._server = ThreadedServer(self.app, host=host, port=port, uds=uds)

    @property
    def url(self) -> str:
        if self._server.url is None:
            raise RuntimeError("the capture server is not started")
        return self._server.url

    @property
    def port(self) -> int:
        return self._server.port

    @property
    def on_call(self) -> Callable[[ModelCall], None] | None:
        """Called on the proxy's thread with each recorded call (also failed ones)."""
        return self._captures.on_call

    @on_call.setter
    def on_call(self, hook: Callable[[ModelCall], None] | None) -> None:
        self._captures.on_call = hook

    def register_session(self, session_id: str) -> None:
        self._captures.register(session_id)

    def unregister_session(self, session_id: str) -> None:
        """Refuse further calls for the session (its recorded calls stay until drained)."""
        self._captures.unregister(session_id)

    def sessions(self) -> list[str]:
        return self._captures.sessions()

    def calls(self, session_id: str) -> list[ModelCall]:
        return self._captures.calls(session_id)

    def drain(self, session_id: str) -> list[ModelCall]:
        """The session's calls so far, removed from the proxy."""
        return self._captures.drain(session_id)


def _loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m openenv.core.harness.capture",
        description="Record the model calls of agent harnesses on their way to a model endpoint.",
    )
    parser.add_argument("--llm-url", required=True, help="the model endpoint to forward to")
    parser.add_argument("--model", default=None, help="model name sent upstream")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100)
    parser.add_argument("--uds", default=None, help="also serve on this Unix socket")
    parser.add_argument("--capture-level", default="tokens", choices=_CAPTURE_LEVELS)
    parser.add_argument(
        "--upstream-api", default="auto", choices=("auto", "openai_chat", "anthropic")
    )
    parser.add_argument(
        "--no-require-registered", action="store_true", help="accept any API key as a session id"
    )
    parser.add_argument(
        "--api-key",
        default=settings.LLM_API_KEY.raw(),
        help="key for the model endpoint (default $OPENENV_LLM_API_KEY)",
    )
    parser.add_argument(
        "--admin-key",
        default=settings.CAPTURE_ADMIN_KEY.raw(),
        help="guards /sessions (default $OPENENV_CAPTURE_ADMIN_KEY); required off loopback",
    )
    args = parser.parse_args(argv)
    if not _loopback_host(args.host) and not args.admin_key:
        parser.error("--admin-key (or $OPENENV_CAPTURE_ADMIN_KEY) is required off loopback")
    server = CaptureServer(
        llm_url=args.llm_url,
        model=args.model,
        host=args.host,
        port=args.port,
        uds=args.uds,
        api_key=args.api_key,
        capture_level=args.capture_level,
        require_registered=not args.no_require_registered,
        admin_key=args.admin_key,
        upstream_api=args.upstream_api,
    )
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    with server:
        print(server.url, flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
