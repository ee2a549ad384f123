"""A scripted model server that stands in for a paid model API in tests and examples.

It speaks the OpenAI chat-completions and Anthropic Messages wire formats (whole replies and
streamed server-sent events) over real HTTP, so real clients -- the ``openai`` and
``anthropic`` SDKs, Claude Code, litellm, mini-swe-agent -- can be driven through a rollout
without a model, a GPU or an API key. Replies come from a script:

```python
from openenv.testing.model_standin import ModelStandIn, ScriptedReply

script = [
    ScriptedReply(tool_calls=[{"name": "bash", "arguments": {"command": "ls"}}]),
    ScriptedReply(text="done"),
]
with ModelStandIn(script) as standin:
    client = openai.OpenAI(base_url=standin.url + "/v1", api_key="unused")
    ...
    standin.requests  # what the client sent, in order
```

A list script is replayed in order; once exhausted every further call is answered HTTP 500
with a message saying so (a test that expected fewer calls fails loudly). A callable script
gets each `StandInRequest` and returns the reply, e.g. to answer a harness's side requests
(titles, quota checks) differently from its main loop.

``python -m openenv.testing.model_standin --script replies.json`` serves a JSON list of
replies (objects with `ScriptedReply`'s fields) and prints its URL.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import threading
from collections.abc import (
    AsyncIterator,
    Callable,
    Generator,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from openenv.core.harness.capture.dialects import (
    APIType,
    Completion,
    anthropic_sse,
    error_body,
    openai_sse,
    rough_token_count,
    to_anthropic_message,
    to_openai_chat_completion,
    tool_calls_from,
)
from openenv.core.harness.capture.serving import BackgroundServing, ThreadedServer

__all__ = ["ModelStandIn", "ScriptedReply", "StandInRequest"]

Dialect = Literal["openai", "anthropic"]


@dataclass
class ScriptedReply:
    """One model turn. ``tool_calls`` are ``{"name", "arguments"}`` dicts (an ``id`` is made
    up when missing); ``stop_reason`` defaults to tool use when there are tool calls, else a
    normal end; ``usage`` (``prompt_tokens``/``completion_tokens`` or Anthropic's
    ``input_tokens``/``output_tokens``) defaults to a rough count; ``token_ids`` and
    ``logprobs`` are returned the way vLLM returns them (OpenAI dialect)."""

    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str | None = None
    usage: dict[str, int] | None = None
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    prompt_token_ids: list[int] | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ScriptedReply:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown ScriptedReply field(s) {unknown}; expected {sorted(known)}")
        return cls(**dict(data))


@dataclass
class StandInRequest:
    """A request the stand-in received: its dialect, JSON body and headers (lower-cased)."""

    dialect: Dialect
    body: dict[str, Any]
    headers: dict[str, str]
    path: str = ""


Script = Sequence[ScriptedReply] | Callable[[StandInRequest], ScriptedReply]


class ScriptExhaustedError(RuntimeError):
    pass


class ModelStandIn(BackgroundServing):
    """A scripted OpenAI/Anthropic-compatible model server on loopback, run in a thread."""

    def __init__(
        self,
        script: Script | Iterable[ScriptedReply],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        model: str = "standin-model",
        dialects: Sequence[Dialect] = ("openai", "anthropic"),
    ) -> None:
        """``dialects`` limits the APIs served (``("openai",)`` plays an OpenAI-only server
        such as vLLM: ``/v1/messages`` is then a 404)."""
        self._script: Callable[[StandInRequest], ScriptedReply] | list[ScriptedReply]
        self._script = script if callable(script) else list(script)
        self.model = model
        self.dialects = tuple(dialects)
        self.requests: list[StandInRequest] = []
        self._next = 0
        self._lock = threading.Lock()
        self._server = ThreadedServer(self.app(), host=host, port=port)

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        if self._server.url is None:
            raise RuntimeError("the stand-in is not started (use `with ModelStandIn(...)`)")
        return self._server.url

    def start(self, timeout_s: float = 30.0) -> str:
        """Serve from a background thread; returns the URL (also awaitable, so async tests
        may write ``await standin.start()``: the server has its own thread and loop)."""
        return _AwaitableURL(self._server.start(timeout_s))

    async def astart(self, timeout_s: float = 30.0) -> str:
        """`start` without blocking the running event loop."""
        return await asyncio.to_thread(self.start, timeout_s)

    async def astop(self) -> None:
        await asyncio.to_thread(self.stop)

    async def __aenter__(self) -> ModelStandIn:
        await self.astart()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.astop()

    @property
    def remaining(self) -> int | None:
        """Replies left in a list script (None for a callable one)."""
        if callable(self._script):
            return None
        return len(self._script) - self._next

    # -- replies -----------------------------------------------------------------------------

    def _reply_for(self, request: StandInRequest) -> ScriptedReply:
        with self._lock:
            self.requests.append(request)
            if callable(self._script):
                return self._script(request)
            if self._next >= len(self._script):
                raise ScriptExhaustedError(
                    f"model stand-in script exhausted: all {len(self._script)} scripted "
                    f"replies were used and request #{len(self.requests)} got none"
                )
            reply = self._script[self._next]
            self._next += 1
            return reply

    def _completion(self, reply: ScriptedReply, request: StandInRequest) -> Completion:
        usage = reply.usage or {}
        prompt = usage.get("prompt_tokens", usage.get("input_tokens"))
        if prompt is None:
            prompt = (
                len(reply.prompt_token_ids)
                if reply.prompt_token_ids is not None
                else rough_token_count(request.body.get("messages", []))
            )
        completion = usage.get("completion_tokens", usage.get("output_tokens"))
        if completion is None:
            completion = (
                len(reply.token_ids)
                if reply.token_ids is not None
                else rough_token_count(reply.text + json.dumps(reply.tool_calls))
            )
        prefix = "toolu" if request.dialect == "anthropic" else "call"
        return Completion(
            text=reply.text,
            tool_calls=tool_calls_from(reply.tool_calls, prefix),
            stop_reason=reply.stop_reason,
            prompt_tokens=int(prompt),
            completion_tokens=int(completion),
            model=str(request.body.get("model") or self.model),
            prompt_token_ids=reply.prompt_token_ids,
            token_ids=reply.token_ids,
            logprobs=reply.logprobs,
        )

    # -- HTTP ------------------------------------------------------------------------------------

    def app(self) -> Starlette:
        async def chat(request: Request) -> Response:
            return await self._answer(request, "openai")

        async def messages(request: Request) -> Response:
            return await self._answer(request, "anthropic")

        async def count_tokens(request: Request) -> Response:
            body = await _json_body(request)
            if body is None:
                return _error("anthropic", 400, "request body must be a JSON object")
            counted = {k: body.get(k) for k in ("system", "messages", "tools") if body.get(k)}
            return JSONResponse({"input_tokens": rough_token_count(counted)})

        async def models(request: Request) -> Response:
            entry = {
                "id": self.model,
                "object": "model",
                "type": "model",
                "created": 0,
                "created_at": "2025-01-01T00:00:00Z",
                "owned_by": "openenv",
                "display_name": self.model,
            }
            return JSONResponse(
                {
                    "object": "list",
                    "data": [entry],
                    "has_more": False,
                    "first_id": self.model,
                    "last_id": self.model,
                }
            )

        async def health(request: Request) -> Response:
            return JSONResponse({"status": "healthy"})

        routes = [
            Route("/v1/models", models, methods=["GET"]),
            Route("/models", models, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
        ]
        if "openai" in self.dialects:
            routes += [
                Route("/v1/chat/completions", chat, methods=["POST"]),
                Route("/chat/completions", chat, methods=["POST"]),
            ]
        if "anthropic" in self.dialects:
            routes += [
                Route("/v1/messages", messages, methods=["POST"]),
                Route("/messages", messages, methods=["POST"]),
                Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
            ]
        return Starlette(routes=routes)

    async def _answer(self, request: Request, dialect: Dialect) -> Response:
        body = await _json_body(request)
        if body is None:
            return _error(dialect, 400, "request body must be a JSON object")
        received = StandInRequest(
            dialect=dialect,
            body=body,
            headers={k.lower(): v for k, v in request.headers.items()},
            path=request.url.path,
        )
        try:
            reply: Any = self._reply_for(received)
        except ScriptExhaustedError as exc:
            return _error(dialect, 500, str(exc))
        except Exception as exc:  # a callable script's bug: say so to the client and the test
            return _error(dialect, 500, f"model stand-in script raised {exc!r}")
        if isinstance(reply, Mapping):
            reply = ScriptedReply.from_dict(reply)
        completion = self._completion(reply, received)
        if body.get("stream"):
            events: Iterator[str]
            if dialect == "anthropic":
                events = anthropic_sse(completion)
            else:
                options = body.get("stream_options") or {}
                events = openai_sse(completion, include_usage=bool(options.get("include_usage")))
            return StreamingResponse(_aiter(events), media_type="text/event-stream")
        if dialect == "anthropic":
            return JSONResponse(to_anthropic_message(completion))
        return JSONResponse(to_openai_chat_completion(completion))


class _AwaitableURL(str):
    """A URL that `await` gives back unchanged (the server is already up)."""

    def __await__(self) -> Generator[Any, None, str]:
        yield from ()
        return str(self)


async def _aiter(events: Iterator[str]) -> AsyncIterator[str]:
    for event in events:
        yield event


async def _json_body(request: Request) -> dict[str, Any] | None:
    try:
        body = await request.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def _error(dialect: Dialect, status: int, message: str) -> JSONResponse:
    api = APIType.ANTHROPIC if dialect == "anthropic" else APIType.OPENAI_CHAT
    return JSONResponse(error_body(api, status, message), status_code=status)


def load_script(path: str) -> list[ScriptedReply]:
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    if not isinstance(data, list):
        raise ValueError(f"{path}: the script must be a JSON list of replies")
    return [ScriptedReply.from_dict(item) for item in data]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m openenv.testing.model_standin",
        description="Serve scripted model replies over the OpenAI and Anthropic APIs "
        "(a stand-in for a paid model API in tests and examples).",
    )
    parser.add_argument("--script", required=True, help="JSON file: a list of replies")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        script = load_script(args.script)
    except (OSError, ValueError, TypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    standin = ModelStandIn(script, host=args.host, port=args.port)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    with standin:
        print(standin.url, flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
