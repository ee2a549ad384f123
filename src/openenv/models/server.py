"""An OpenAI-compatible chat-completions server for a local transformers model.

It answers the way vLLM's OpenAI server does, so everything that talks to vLLM (the capture
proxy, rollouts, ``openenv collect``, litellm, the OpenAI SDK, Inspect AI) talks to it
unchanged:

- ``POST /v1/chat/completions``, whole or streamed (``stream``, ``stream_options``);
- ``logprobs`` / ``top_logprobs``: per-token log-probabilities in ``choices[].logprobs``;
- vLLM's ``return_token_ids``: ``prompt_token_ids`` beside the choices, ``token_ids`` in
  each choice (and in each streamed chunk);
- ``tools`` and ``tool_choice`` (``auto``, ``none``, ``required`` or one function): tool calls
  in the Hermes format (`tool_format`); ``required`` and a named function start the answer
  with the call's opening, as vLLM's structured output makes the model call one;
- ``temperature``, ``top_p``, ``top_k``, ``min_p``, ``repetition_penalty``, ``presence_penalty``,
  ``frequency_penalty``, ``logit_bias``, ``stop``, ``max_tokens``/``max_completion_tokens``,
  ``n`` and ``seed``;
- ``GET /v1/models``, ``GET /health``, ``POST /tokenize`` and ``POST /detokenize``;
- ``GET /metrics``: requests answered and refused, tokens read and generated (Prometheus),
  so a test or an example can check that every call the model answered was recorded.

The request's ``model`` names whatever the caller was configured with (a harness sends its
own model name): it is not checked, as llama.cpp's server does not, and replies carry the
served name. Requests are answered one generation at a time; the others wait in order.

``openenv model serve`` runs it; `ModelServer` runs it in a background thread (tests,
examples).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from openenv.core.harness.capture.dialects import (
    APIType,
    Completion,
    CompletionToolCall,
    error_body,
    to_openai_chat_completion,
)
from openenv.core.harness.capture.serving import BackgroundServing, ThreadedServer

from .engine import (
    ContextLengthError,
    GeneratedToken,
    GenerationEngine,
    SamplingParams,
    sampling_generator,
)
from .tool_format import CALL_OPEN, call_is_complete, parse_answer, safe_prefix_length

__all__ = ["ChatRequest", "ModelServer", "create_app", "load_engine", "request_counts"]

logger = logging.getLogger(__name__)

#: Default answer length when a request names none (vLLM's default is the rest of the
#: context, minutes of CPU for a model that rambles).
DEFAULT_MAX_TOKENS = 512
MAX_CHOICES = 16
#: Far more than the context holds: a larger body is refused before it is read.
MAX_BODY_BYTES = 16 * 1024 * 1024
MAX_TOP_LOGPROBS = 20


class ChatRequest(BaseModel):
    """The chat-completions fields this server reads; anything else is accepted and ignored,
    as OpenAI-compatible servers do."""

    model_config = ConfigDict(extra="allow")

    messages: list[dict[str, Any]] = Field(min_length=1)
    model: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=0, ge=-1)
    min_p: float = Field(default=0.0, ge=0.0, le=1.0)
    repetition_penalty: float = Field(default=1.0, gt=0.0)
    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    seed: int | None = None
    stop: str | list[str] | None = None
    n: int = Field(default=1, ge=1, le=MAX_CHOICES)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    return_token_ids: bool = False
    logit_bias: dict[int, float] | None = None

    @field_validator("messages")
    @classmethod
    def _messages_have_roles(cls, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for index, message in enumerate(messages):
            if not isinstance(message.get("role"), str):
                raise ValueError(f"messages[{index}] has no role")
        return messages

    def sampling(self, default_max_tokens: int) -> SamplingParams:
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return SamplingParams(
            max_tokens=self.max_completion_tokens or self.max_tokens or default_max_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=max(0, self.top_k),
            min_p=self.min_p,
            repetition_penalty=self.repetition_penalty,
            presence_penalty=self.presence_penalty,
            frequency_penalty=self.frequency_penalty,
            seed=self.seed,
            stop=stops,
            logit_bias=dict(self.logit_bias or {}),
            top_logprobs=(self.top_logprobs or 0) if self.logprobs else 0,
        )

    def forced_call_openings(self) -> list[str]:
        """The openings a tool call must start the answer with (``required``: one per tool,
        the model picks; a named function: that one), or none. Each ends where the model
        writes the arguments object's first key, so it cannot give a bare value instead."""
        if not self.tools:
            return []
        names: list[str] = []
        choice = self.tool_choice
        if choice == "required":
            names = [
                str((tool.get("function") or tool).get("name"))
                for tool in self.tools
                if (tool.get("function") or tool).get("name")
            ]
        elif isinstance(choice, dict):
            name = (choice.get("function") or {}).get("name")
            if isinstance(name, str) and name:
                names = [name]
        return [f'{CALL_OPEN}\n{{"name": {json.dumps(name)}, "arguments": {{' for name in names]

    def parses_tools(self) -> bool:
        return bool(self.tools) and self.tool_choice != "none"


class _BadRequest(Exception):
    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class _Choice:
    """One generated answer, token by token."""

    tokens: list[GeneratedToken] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(token.text for token in self.tokens)

    @property
    def finish_reason(self) -> str:
        return (self.tokens[-1].finish_reason if self.tokens else None) or "length"


class _Model:
    """The engine and the request-level logic shared by the whole and streamed answers."""

    def __init__(
        self,
        engine: GenerationEngine,
        name: str,
        default_max_tokens: int,
        max_tokens_limit: int | None = None,
    ) -> None:
        self.engine = engine
        self.name = name
        self.default_max_tokens = default_max_tokens
        self.max_tokens_limit = max_tokens_limit
        self.count_tokens: Callable[[str, int], None] = lambda kind, n: None

    def prepare(self, request: ChatRequest) -> tuple[list[int], SamplingParams, list[list[int]]]:
        tools = [t for t in request.tools or [] if isinstance(t, dict)]
        try:
            prompt = self.engine.prompt_ids(request.messages, tools or None)
        except ContextLengthError as exc:
            raise _BadRequest(str(exc)) from exc
        except Exception as exc:  # the template refused the messages
            raise _BadRequest(f"the chat template could not render the messages: {exc}") from exc
        vocabulary = len(self.engine.tokenizer)
        bad = [t for t in request.logit_bias or {} if not 0 <= t < vocabulary]
        if bad:
            raise _BadRequest(f"logit_bias names token ids outside [0, {vocabulary}): {bad[:5]}")
        forced = [
            list(self.engine.tokenizer.encode(opening, add_special_tokens=False))
            for opening in request.forced_call_openings()
        ]
        params = request.sampling(self.default_max_tokens)
        if self.max_tokens_limit:
            params.max_tokens = min(params.max_tokens, self.max_tokens_limit)
        if forced:  # a call is what was asked for: the answer ends when its JSON closes
            params.end_when = call_is_complete
        return prompt, params, forced

    def token_entry(self, token: GeneratedToken) -> dict[str, Any]:
        text = self.engine.tokenizer.decode([token.token_id])
        return {
            "token": text,
            "logprob": token.logprob,
            "bytes": list(text.encode("utf-8")),
            "top_logprobs": [
                {"token": decoded, "logprob": logprob, "bytes": list(decoded.encode("utf-8"))}
                for decoded, logprob in (
                    (self.engine.tokenizer.decode([i]), lp) for i, lp in token.top
                )
            ],
        }

    def completion(
        self, request: ChatRequest, prompt: list[int], choice: _Choice, request_id: str
    ) -> Completion:
        text, calls = choice.text, []
        if request.parses_tools():
            parsed = parse_answer(text)
            if parsed.tool_calls:
                text = parsed.content or ""
                calls = [
                    CompletionToolCall(id=c["id"], name=c["name"], arguments=c["arguments"])
                    for c in parsed.tool_calls
                ]
        finish = "tool_calls" if calls else choice.finish_reason  # as vLLM reports it
        return Completion(
            text=text,
            tool_calls=calls,
            stop_reason=finish,
            prompt_tokens=len(prompt),
            completion_tokens=len(choice.tokens),
            model=self.name,
            id=request_id,
            prompt_token_ids=list(prompt),
            token_ids=[t.token_id for t in choice.tokens],
            logprobs=[t.logprob for t in choice.tokens],
        )

    def choice_body(self, request: ChatRequest, completion: Completion, choice: _Choice) -> dict:
        body = to_openai_chat_completion(completion)["choices"][0]
        body["logprobs"] = (
            {"content": [self.token_entry(t) for t in choice.tokens]} if request.logprobs else None
        )
        if not request.return_token_ids:
            body.pop("token_ids", None)
        return body


def create_app(
    engine: GenerationEngine,
    *,
    model_name: str,
    default_max_tokens: int = DEFAULT_MAX_TOKENS,
    max_tokens_limit: int | None = None,
) -> Starlette:
    """The ASGI app serving ``engine`` as ``model_name``. ``max_tokens_limit`` caps every
    request's answer (an agent such as Claude Code asks for 8,192 tokens a call: minutes of
    CPU each for a small model that rambles)."""
    served = _Model(engine, model_name, default_max_tokens, max_tokens_limit)

    metrics = CollectorRegistry()
    requests_total = Counter(
        "openenv_model_requests",
        "Chat-completion requests, by outcome (answered, or refused with an error).",
        ["outcome"],
        registry=metrics,
    )
    tokens_total = Counter(
        "openenv_model_tokens", "Tokens read and generated.", ["kind"], registry=metrics
    )
    served.count_tokens = lambda kind, n: tokens_total.labels(kind).inc(n)

    async def chat(request: Request) -> Response:
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            response: Response = _error(413, f"request body over {MAX_BODY_BYTES} bytes")
        else:
            response = await answer(request)
        requests_total.labels("answered" if response.status_code == 200 else "refused").inc()
        return response

    async def answer(request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "request body must be JSON")
        if not isinstance(body, dict):
            return _error(400, "request body must be a JSON object")
        try:
            chat_request = ChatRequest.model_validate(body)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first.get("loc", ()))
            return _error(400, f"invalid request: {where}: {first.get('msg')}")
        if chat_request.stream and chat_request.n > 1:
            return _error(400, "n > 1 is not supported with stream")
        try:
            prompt, params, forced = await asyncio.to_thread(served.prepare, chat_request)
        except _BadRequest as exc:
            return _error(exc.status, str(exc))
        request_id = uuid.uuid4().hex[:24]
        if chat_request.stream:
            events = _stream(served, chat_request, prompt, params, forced, request_id)
            return StreamingResponse(events, media_type="text/event-stream")
        choices = await asyncio.to_thread(
            _generate_all, served, prompt, params, forced, chat_request.n
        )
        completions = [served.completion(chat_request, prompt, c, request_id) for c in choices]
        reply = to_openai_chat_completion(completions[0])
        reply["choices"] = []
        for index, (completion, choice) in enumerate(zip(completions, choices, strict=True)):
            entry = served.choice_body(chat_request, completion, choice)
            entry["index"] = index
            reply["choices"].append(entry)
        generated = sum(len(c.tokens) for c in choices)
        served.count_tokens("prompt", len(prompt))
        served.count_tokens("generated", generated)
        reply["usage"] = {
            "prompt_tokens": len(prompt),
            "completion_tokens": generated,
            "total_tokens": len(prompt) + generated,
        }
        if not chat_request.return_token_ids:
            reply.pop("prompt_token_ids", None)
        return JSONResponse(reply)

    async def models(request: Request) -> Response:
        entry = {
            "id": model_name,
            "object": "model",
            "created": 0,
            "owned_by": "openenv",
            "max_model_len": engine.context_length,
        }
        return JSONResponse({"object": "list", "data": [entry]})

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "healthy", "model": model_name})

    async def prometheus(request: Request) -> Response:
        return Response(generate_latest(metrics), media_type=CONTENT_TYPE_LATEST)

    async def tokenize(request: Request) -> Response:
        body = await _json_object(request)
        if body is None:
            return _error(400, "request body must be a JSON object")
        if isinstance(body.get("messages"), list):
            try:
                ids = engine.prompt_ids(body["messages"], body.get("tools"))
            except ContextLengthError as exc:
                return _error(400, str(exc))
        elif isinstance(body.get("prompt"), str):
            ids = list(engine.tokenizer.encode(body["prompt"], add_special_tokens=False))
        else:
            return _error(400, "give a `prompt` string or `messages`")
        return JSONResponse(
            {"tokens": ids, "count": len(ids), "max_model_len": engine.context_length}
        )

    async def detokenize(request: Request) -> Response:
        body = await _json_object(request)
        tokens = (body or {}).get("tokens")
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            return _error(400, "`tokens` must be a list of token ids")
        vocabulary = len(engine.tokenizer)
        if any(t < 0 or t >= vocabulary for t in tokens):
            return _error(400, f"token ids must be in [0, {vocabulary})")
        return JSONResponse({"prompt": engine.decode(tokens)})

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/chat/completions", chat, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/metrics", prometheus, methods=["GET"]),
            Route("/tokenize", tokenize, methods=["POST"]),
            Route("/detokenize", detokenize, methods=["POST"]),
        ]
    )


def _generate_all(
    served: _Model,
    prompt: list[int],
    params: SamplingParams,
    forced: list[list[int]],
    n: int,
) -> list[_Choice]:
    generator = sampling_generator(params.seed)  # one for all n choices: they differ
    choices = []
    for _ in range(n):
        tokens = served.engine.generate(prompt, params, generator=generator, forced=forced)
        choices.append(_Choice(list(tokens)))
    return choices


async def _stream(
    served: _Model,
    request: ChatRequest,
    prompt: list[int],
    params: SamplingParams,
    forced: list[list[int]],
    request_id: str,
) -> AsyncIterator[str]:
    """``chat.completion.chunk`` events as tokens are made: content as soon as it cannot be
    the start of a tool call, then the calls, the finish reason and the usage."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[GeneratedToken | BaseException | None] = asyncio.Queue()
    cancelled = threading.Event()

    def produce() -> None:
        try:
            for token in served.engine.generate(prompt, params, cancelled=cancelled, forced=forced):
                loop.call_soon_threadsafe(queue.put_nowait, token)
        except BaseException as exc:  # reaches the client as an error event
            loop.call_soon_threadsafe(queue.put_nowait, exc)
        finally:
            loop.call_soon_threadsafe(queue.put_nowait, None)

    base = {
        "id": f"chatcmpl-{request_id}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": served.name,
    }

    def chunk(delta: dict[str, Any], tokens: Sequence[GeneratedToken] = (), **extra: Any) -> str:
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": None, **extra}
        if tokens and request.logprobs:
            choice["logprobs"] = {"content": [served.token_entry(t) for t in tokens]}
        if tokens and request.return_token_ids:
            choice["token_ids"] = [t.token_id for t in tokens]
        return _sse({**base, "choices": [choice]})

    first: dict[str, Any] = {
        **base,
        "choices": [
            {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
        ],
    }
    if request.return_token_ids:
        first["prompt_token_ids"] = list(prompt)
    worker = threading.Thread(target=produce, name="openenv-model-stream", daemon=True)
    worker.start()
    choice = _Choice()
    pending: list[GeneratedToken] = []  # tokens not yet sent with a chunk
    sent = 0  # characters of content sent
    holds_tools = request.parses_tools()
    try:
        yield _sse(first)
        while True:
            item = await queue.get()
            if item is None:
                break
            if isinstance(item, BaseException):
                logger.error("generation failed", exc_info=item)
                yield _sse(error_body(APIType.OPENAI_CHAT, 500, f"generation failed: {item}"))
                yield "data: [DONE]\n\n"
                return
            choice.tokens.append(item)
            pending.append(item)
            text = choice.text
            ready = safe_prefix_length(text) if holds_tools else len(text)
            if ready > sent and (not holds_tools or CALL_OPEN not in text[:ready]):
                yield chunk({"content": text[sent:ready]}, pending)
                sent, pending = ready, []
        served.count_tokens("prompt", len(prompt))
        served.count_tokens("generated", len(choice.tokens))
        completion = served.completion(request, prompt, choice, request_id)
        if completion.tool_calls:
            for index, call in enumerate(completion.tool_calls):
                function = {"name": call.name, "arguments": json.dumps(call.arguments)}
                delta = {
                    "tool_calls": [
                        {"index": index, "id": call.id, "type": "function", "function": function}
                    ]
                }
                yield chunk(delta, pending if index == 0 else ())
            pending = []
        elif len(completion.text) > sent or pending:
            yield chunk({"content": completion.text[sent:]}, pending)
            pending = []
        finish = completion.stop_reason or "stop"
        yield _sse({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        options = request.stream_options or {}
        if options.get("include_usage"):
            usage = {
                "prompt_tokens": len(prompt),
                "completion_tokens": len(choice.tokens),
                "total_tokens": len(prompt) + len(choice.tokens),
            }
            yield _sse({**base, "choices": [], "usage": usage})
        yield "data: [DONE]\n\n"
    finally:
        cancelled.set()  # the client left: stop generating for it


def _sse(payload: Any) -> str:
    return f"data: {json.dumps(payload)}\n\n"


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse(error_body(APIType.OPENAI_CHAT, status, message), status_code=status)


async def _json_object(request: Request) -> dict[str, Any] | None:
    try:
        body = await request.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def load_engine(
    checkpoint: Path | str | None = None,
    *,
    threads: int | None = 1,
    context_length: int | None = None,
) -> GenerationEngine:
    """The engine for a checkpoint folder (default: SmolLM2-135M-Instruct, converted once).
    ``threads`` sets torch's intra-op threads for the process: one is the fastest for a small
    model's token-by-token decoding, and oversubscribed threads on a busy machine are many
    times slower."""
    import torch

    from .checkpoint import load_model

    if threads:
        torch.set_num_threads(threads)
    model, tokenizer = load_model(checkpoint)
    return GenerationEngine(model, tokenizer, context_length=context_length)


class ModelServer(BackgroundServing):
    """The model served on loopback from a background thread::

    with ModelServer() as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
    """

    def __init__(
        self,
        checkpoint: Path | str | None = None,
        *,
        model_name: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        threads: int | None = 1,
        default_max_tokens: int = DEFAULT_MAX_TOKENS,
        max_tokens_limit: int | None = None,
        engine: GenerationEngine | None = None,
    ) -> None:
        from .checkpoint import DEFAULT_MODEL_NAME

        self.engine = engine or load_engine(checkpoint, threads=threads)
        self.model_name = model_name or (
            Path(checkpoint).name if checkpoint else DEFAULT_MODEL_NAME
        )
        app = create_app(
            self.engine,
            model_name=self.model_name,
            default_max_tokens=default_max_tokens,
            max_tokens_limit=max_tokens_limit,
        )
        self._server = ThreadedServer(app, host=host, port=port, graceful_s=5)

    @property
    def url(self) -> str:
        if self._server.url is None:
            raise RuntimeError("the model server is not started (use `with ModelServer()`)")
        return self._server.url

    def requests_answered(self) -> int:
        """Chat completions answered so far (from ``/metrics``)."""
        return int(request_counts(self.url).get("answered", 0))


def request_counts(url: str) -> dict[str, float]:
    """``{"answered": n, "refused": n}`` from a model server's ``/metrics`` at ``url``."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(url.rstrip("/") + "/metrics", timeout=10).text
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "openenv_model_requests_total":
                counts[sample.labels["outcome"]] = sample.value
    return counts


def serve_forever(
    checkpoint: Path | str | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 8001,
    threads: int | None = 1,
    default_max_tokens: int = DEFAULT_MAX_TOKENS,
    max_tokens_limit: int | None = None,
    model_name: str | None = None,
    on_ready: Any = None,
) -> None:
    """Serve in the foreground until interrupted (`openenv model serve`)."""
    import uvicorn

    from .checkpoint import DEFAULT_MODEL_NAME

    engine = load_engine(checkpoint, threads=threads)
    name = model_name or (Path(checkpoint).name if checkpoint else DEFAULT_MODEL_NAME)
    app = create_app(
        engine,
        model_name=name,
        default_max_tokens=default_max_tokens,
        max_tokens_limit=max_tokens_limit,
    )
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    if on_ready is not None:
        original = server.startup

        async def startup(sockets: Any = None) -> None:
            await original(sockets)
            if server.started:
                on_ready(f"http://{host}:{port}", name)

        server.startup = startup  # type: ignore[method-assign]
    server.run()
