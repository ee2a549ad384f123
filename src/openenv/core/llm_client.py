"""Async clients for chat LLM APIs, used by LLM-judge rubrics and agents.

`OpenAIClient` talks to any OpenAI-compatible ``/v1/chat/completions`` endpoint (OpenAI, vLLM,
SGLang, llama.cpp, Ollama, TGI, LiteLLM, ...); `AnthropicClient` to the Anthropic Messages API
(``/v1/messages``). Both use httpx directly and share the same failure handling:

* HTTP 408, 409, 429 and 5xx replies, timeouts and connection errors are retried up to
  ``max_retries`` times (so at most ``max_retries + 1`` attempts) with exponential backoff and
  jitter; a ``Retry-After`` / ``retry-after-ms`` header replaces the computed delay (both are
  capped at ``backoff_max_s``);
* when the retries are exhausted, or the endpoint cannot be reached at all,
  `LLMUnavailableError` is raised (`LLMTimeoutError` when the last attempt timed out);
* other HTTP errors (400, 401, 404, ...) raise `LLMStatusError` at once;
* a reply that is not the expected JSON raises `LLMResponseError`.

Messages use the OpenAI chat format everywhere (``{"role", "content"}``, assistant
``tool_calls``, ``role="tool"`` results); `AnthropicClient` converts them. Tools may be given
as MCP tool descriptions (``name``, ``description``, ``inputSchema``), OpenAI function tools or
Anthropic tools.

An API key is sent only when given; `create_llm_client` reads ``OPENAI_API_KEY`` /
``ANTHROPIC_API_KEY`` only when no ``base_url`` is given (so a key meant for the official API
is never sent to another host).
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import os
import random
import time
import weakref
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

__all__ = [
    "AnthropicClient",
    "LLMClient",
    "LLMError",
    "LLMResponse",
    "LLMResponseError",
    "LLMStatusError",
    "LLMTimeoutError",
    "LLMUnavailableError",
    "OpenAIClient",
    "ToolCall",
    "create_llm_client",
]


# -- results and errors ------------------------------------------------------------------


@dataclass
class ToolCall:
    """A tool call requested by the model; ``args`` is the decoded argument object."""

    id: str
    name: str
    args: dict[str, Any] = field(default_factory=dict)


@dataclass
class LLMResponse:
    """A model reply: text (``""`` when the model only called tools, as in OpenEnv) and tool
    calls."""

    content: str | None = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    raw: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    def to_message_dict(self) -> dict[str, Any]:
        """This reply as an OpenAI-format assistant message, to append to the conversation."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": json.dumps(call.args)},
                }
                for call in self.tool_calls
            ]
        return message


class LLMError(Exception):
    """Base class of LLM client errors."""


class LLMUnavailableError(LLMError):
    """The endpoint could not be reached or kept failing (429/5xx) after all retries."""

    def __init__(
        self,
        message: str,
        *,
        url: str | None = None,
        attempts: int = 1,
        status_code: int | None = None,
    ) -> None:
        super().__init__(message)
        self.url = url
        self.attempts = attempts
        self.status_code = status_code


class LLMTimeoutError(LLMUnavailableError):
    """The last attempt timed out."""


class LLMStatusError(LLMError):
    """The endpoint answered with an HTTP error that retrying will not fix (e.g. 400, 401)."""

    def __init__(self, message: str, *, url: str, status_code: int, body: str) -> None:
        super().__init__(message)
        self.url = url
        self.status_code = status_code
        self.body = body


class LLMResponseError(LLMError):
    """The endpoint answered 2xx but the body is not a well-formed reply."""

    def __init__(self, message: str, *, body: Any = None) -> None:
        super().__init__(message)
        self.body = body


# -- tool schemas --------------------------------------------------------------------------


def _tool_dict(tool: Any) -> dict[str, Any]:
    if isinstance(tool, Mapping):
        return dict(tool)
    dump = getattr(tool, "model_dump", None)
    if dump is not None:  # e.g. an mcp.types.Tool
        return dump(by_alias=True, exclude_none=True)
    raise TypeError(f"a tool must be a dict or a pydantic model, got {type(tool).__name__}")


def _object_schema(schema: Any) -> dict[str, Any]:
    """A JSON schema with ``type: object`` at the top, as the tool APIs require.

    A top-level ``oneOf``/``anyOf``/``allOf`` of object schemas is flattened into one object
    (properties merged; required = common ones for oneOf/anyOf, all of them for allOf).
    """
    result = dict(schema) if isinstance(schema, Mapping) else {}
    for key in ("oneOf", "anyOf", "allOf"):
        variants = result.get(key)
        if not isinstance(variants, list) or result.get("properties"):
            continue
        properties: dict[str, Any] = {}
        required_sets: list[set[str]] = []
        for variant in variants:
            if isinstance(variant, Mapping):
                properties.update(variant.get("properties") or {})
                required_sets.append(set(variant.get("required") or []))
        if key == "allOf":
            required = set().union(*required_sets)
        else:
            required = set.intersection(*required_sets) if required_sets else set()
        flat = {k: v for k, v in result.items() if k not in ("oneOf", "anyOf", "allOf")}
        flat.update(type="object", properties=properties)
        if required:
            flat["required"] = sorted(required)
        return flat
    result.setdefault("type", "object")
    if result["type"] == "object":
        result.setdefault("properties", {})
    return result


def _tool_parts(tool: Any) -> tuple[str, str, dict[str, Any] | None]:
    data = _tool_dict(tool)
    if data.get("type") == "function" and isinstance(data.get("function"), Mapping):
        function = data["function"]
        return function["name"], function.get("description") or "", function.get("parameters")
    schema = data.get("inputSchema", data.get("input_schema", data.get("parameters")))
    return data["name"], data.get("description") or "", schema


def to_openai_tool(tool: Any) -> dict[str, Any]:
    """An MCP / OpenAI / Anthropic tool description in OpenAI function-tool format."""
    name, description, schema = _tool_parts(tool)
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": _object_schema(schema),
        },
    }


def to_anthropic_tool(tool: Any) -> dict[str, Any]:
    """An MCP / OpenAI / Anthropic tool description in Anthropic tool format."""
    name, description, schema = _tool_parts(tool)
    return {"name": name, "description": description, "input_schema": _object_schema(schema)}


def decode_tool_arguments(arguments: Any, body: Any) -> dict[str, Any]:
    """A tool call's arguments as a dict (a JSON string is parsed); `LLMResponseError`, with
    the response `body`, when they are not a JSON object."""
    if arguments is None or arguments == "":
        return {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as exc:
            raise LLMResponseError(
                f"tool call arguments are not valid JSON: {arguments[:200]!r}", body=body
            ) from exc
    if not isinstance(arguments, dict):
        raise LLMResponseError(
            f"tool call arguments must be a JSON object, got {type(arguments).__name__}", body=body
        )
    return arguments


def message_text(content: Any) -> str:
    """Text of an OpenAI message content (a string or a list of content parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "") if isinstance(part, Mapping) else str(part) for part in content
        )
    return str(content)


# -- HTTP plumbing ----------------------------------------------------------------------------

_RETRY_STATUSES = frozenset({408, 409, 429})


def _retry_after_s(headers: httpx.Headers) -> float | None:
    milliseconds = headers.get("retry-after-ms")
    if milliseconds:
        try:
            return max(0.0, float(milliseconds) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _join_port(endpoint: str, port: int | None) -> str:
    """``endpoint`` (``http://`` added when it has no scheme, trailing ``/`` dropped) with
    ``port`` added when the URL names none, as OpenEnv does; a different port is an error."""
    url = endpoint.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    parts = urlsplit(url)
    try:
        url_port = parts.port
    except ValueError as exc:
        raise ValueError(f"invalid endpoint URL {endpoint!r}: {exc}") from exc
    if port is None or url_port == port:
        return url
    if url_port is not None:
        raise ValueError(
            f"endpoint {endpoint!r} already names port {url_port}, which conflicts with port={port}"
        )
    return urlunsplit(parts._replace(netloc=f"{parts.netloc}:{port}"))


def _resolve_base_url(
    base_url: str | None, endpoint: str | None, port: int | None, default: str
) -> str:
    if base_url is not None and endpoint is not None:
        raise ValueError("give either base_url or endpoint (+ port), not both")
    if base_url is not None:
        # Also the OpenEnv-style positional call: Client("http://localhost", 8000, "model").
        return _join_port(base_url, port)
    if endpoint is not None:
        return _join_port(endpoint, port)
    if port is not None:
        raise ValueError("port needs an endpoint (e.g. endpoint='http://localhost')")
    return default


def api_root(base_url: str) -> str:
    """Where the API paths (``/v1/...``) start: ``base_url`` without a trailing ``/v1``."""
    return base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url


def _snippet(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


class LLMClient(ABC):
    """An asynchronous chat model.

    As in OpenEnv, ``LLMClient(endpoint, port)`` keeps ``endpoint`` and ``port`` and derives
    ``base_url`` (``"http://localhost"`` and ``8000`` give ``"http://localhost:8000"``); both
    are optional for clients that are not addressed by URL. Subclasses implement `complete`;
    `complete_with_tools` raises NotImplementedError unless overridden.
    """

    def __init__(self, endpoint: str | None = None, port: int | None = None) -> None:
        self.endpoint = endpoint
        self.port = port

    @property
    def base_url(self) -> str:
        """The service's base URL: as set, else ``endpoint`` joined with ``port``."""
        explicit = self.__dict__.get("_base_url")
        if explicit is not None:
            return str(explicit)
        endpoint = self.__dict__.get("endpoint")
        if endpoint is None:
            raise AttributeError(f"{type(self).__name__} has no endpoint, so no base_url")
        return _resolve_base_url(None, endpoint, self.__dict__.get("port"), "")

    @base_url.setter
    def base_url(self, value: str) -> None:
        self.__dict__["_base_url"] = value

    @abstractmethod
    async def complete(self, prompt: str, **kwargs: Any) -> str:
        """Answer a single user prompt with text."""

    async def complete_with_tools(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Any], **kwargs: Any
    ) -> LLMResponse:
        """Continue an OpenAI-format conversation, allowing the model to call ``tools``."""
        raise NotImplementedError(f"{type(self).__name__} does not support tool calling")

    async def aclose(self) -> None:  # noqa: B027 - optional for subclasses
        """Release connections (no-op by default)."""

    async def __aenter__(self) -> LLMClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class HTTPChatClient(LLMClient):
    """Shared plumbing: base URL, retries, per-event-loop httpx client."""

    DEFAULT_BASE_URL = ""
    #: `max_tokens` when none is given; each API has its own sensible default.
    DEFAULT_MAX_TOKENS = 256

    def __init__(
        self,
        base_url: str | None = None,
        port: int | None = None,
        model: str | None = None,
        api_key: str | None = None,
        system_prompt: str | None = None,
        temperature: float | None = 0.0,
        max_tokens: int | None = None,
        *,
        endpoint: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 3,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 30.0,
        headers: Mapping[str, str] | None = None,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        if not model:
            raise ValueError("model is required")
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        if timeout_s <= 0:
            raise ValueError("timeout_s must be > 0")
        resolved = _resolve_base_url(base_url, endpoint, port, self.DEFAULT_BASE_URL)
        # `endpoint`/`port` as given (OpenEnv's attributes); `base_url` joins them.
        super().__init__(endpoint if endpoint is not None else (base_url or resolved), port)
        self.base_url = resolved
        self.model = model
        self.api_key = api_key
        self.system_prompt = system_prompt
        self.temperature = temperature
        self.max_tokens = self.DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.backoff_base_s = float(backoff_base_s)
        self.backoff_max_s = float(backoff_max_s)
        self.extra_headers = dict(headers or {})
        self._external_client = http_client
        self._client: httpx.AsyncClient | None = None
        self._client_loop: weakref.ref[asyncio.AbstractEventLoop] | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_url={self.base_url!r}, model={self.model!r})"

    def _http(self) -> httpx.AsyncClient:
        if self._external_client is not None:
            return self._external_client
        loop = asyncio.get_running_loop()
        owner = self._client_loop() if self._client_loop is not None else None
        if self._client is None or owner is not loop or self._client.is_closed:
            # An httpx client is bound to the loop it first ran on: make one per loop.
            self._client = httpx.AsyncClient(timeout=self.timeout_s)
            self._client_loop = weakref.ref(loop)
        return self._client

    async def aclose(self) -> None:
        client, self._client, self._client_loop = self._client, None, None
        if client is not None and not client.is_closed:
            try:
                await client.aclose()
            except RuntimeError:  # created on another (closed) event loop
                pass

    def _headers(self) -> dict[str, str]:
        return {"content-type": "application/json", **self.extra_headers}

    def _backoff_s(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.backoff_max_s)
        delay = min(self.backoff_max_s, self.backoff_base_s * (2**attempt))
        return delay * (0.5 + random.random() / 2)

    async def _post(
        self, path: str, body: dict[str, Any], headers: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """POST with retries; ``headers`` add to this call's headers only (e.g. a proxy's
        per-request ``anthropic-version``)."""
        url = api_root(self.base_url) + path
        attempts = self.max_retries + 1
        request_headers = {**self._headers(), **(headers or {})}
        for attempt in range(attempts):
            retry_after: float | None = None
            failure: LLMUnavailableError
            try:
                response = await self._http().post(
                    url, json=body, headers=request_headers, timeout=self.timeout_s
                )
            except httpx.TimeoutException as exc:
                cause: BaseException | None = exc
                failure = LLMTimeoutError(
                    f"{url} did not answer within {self.timeout_s:g} s "
                    f"({type(exc).__name__}) after {attempt + 1} attempt(s)",
                    url=url,
                    attempts=attempt + 1,
                )
            except httpx.TransportError as exc:
                cause = exc
                failure = LLMUnavailableError(
                    f"cannot reach {url}: {type(exc).__name__}: {exc or 'connection failed'} "
                    f"(after {attempt + 1} attempt(s))",
                    url=url,
                    attempts=attempt + 1,
                )
            else:
                status = response.status_code
                if status < 400:
                    return self._decode(response)
                text = response.text
                if status not in _RETRY_STATUSES and status < 500:
                    raise LLMStatusError(
                        f"{url} answered HTTP {status}: {_snippet(text)}",
                        url=url,
                        status_code=status,
                        body=text,
                    )
                cause = None
                retry_after = _retry_after_s(response.headers)
                failure = LLMUnavailableError(
                    f"{url} answered HTTP {status} to {attempt + 1} attempt(s): {_snippet(text)}",
                    url=url,
                    attempts=attempt + 1,
                    status_code=status,
                )
            if attempt + 1 >= attempts:
                raise failure from cause
            await asyncio.sleep(self._backoff_s(attempt, retry_after))
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _decode(response: httpx.Response) -> dict[str, Any]:
        try:
            data = response.json()
        except ValueError as exc:
            raise LLMResponseError(
                f"reply is not JSON: {_snippet(response.text)}", body=response.text
            ) from exc
        if not isinstance(data, dict):
            raise LLMResponseError("reply is not a JSON object", body=data)
        return data

    def _sampling(self, kwargs: dict[str, Any]) -> tuple[float | None, int]:
        temperature = kwargs.pop("temperature", self.temperature)
        max_tokens = kwargs.pop("max_tokens", self.max_tokens)
        return temperature, max_tokens


# -- OpenAI-compatible --------------------------------------------------------------------------

_MAX_COMPLETION_TOKENS_PREFIXES = ("o1", "o3", "o4", "gpt-5")


class OpenAIClient(HTTPChatClient):
    """A model behind an OpenAI-compatible ``POST {base}/v1/chat/completions`` endpoint.

    Address it with ``base_url`` (``"http://localhost:8000"``; a trailing ``/v1`` is accepted)
    or with ``endpoint`` and ``port`` (also positionally, OpenEnv style:
    ``OpenAIClient("http://localhost", 8000, "my-model")``). Extra keyword arguments of
    `complete` / `complete_with_tools` go into the request body (``stop``, ``seed``,
    ``response_format``, ``tool_choice``, ...). Reasoning models (o1/o3/o4/gpt-5 families) get
    ``max_completion_tokens`` and no temperature unless ``use_max_completion_tokens`` says
    otherwise.
    """

    DEFAULT_BASE_URL = "https://api.openai.com"

    def __init__(
        self,
        *args: Any,
        use_max_completion_tokens: bool | None = None,
        **kwargs: Any,
    ) -> None:
        """Arguments as for every HTTP client (`base_url`, `model`, `max_tokens`, ...), plus
        `use_max_completion_tokens` (default: by model name, for reasoning models)."""
        super().__init__(*args, **kwargs)
        if use_max_completion_tokens is None:
            use_max_completion_tokens = self.model.startswith(_MAX_COMPLETION_TOKENS_PREFIXES)
        self.use_max_completion_tokens = use_max_completion_tokens

    def _headers(self) -> dict[str, str]:
        headers = super()._headers()
        if self.api_key:
            headers.setdefault("authorization", f"Bearer {self.api_key}")
        return headers

    def _body(
        self, messages: list[dict[str, Any]], tools: Sequence[Any] | None, kwargs: dict[str, Any]
    ) -> dict[str, Any]:
        kwargs = dict(kwargs)
        temperature, max_tokens = self._sampling(kwargs)
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if self.use_max_completion_tokens:
            body["max_completion_tokens"] = max_tokens
        else:
            body["max_tokens"] = max_tokens
            if temperature is not None:
                body["temperature"] = temperature
        if tools:
            body["tools"] = [to_openai_tool(tool) for tool in tools]
        body.update(kwargs)
        return body

    async def complete(self, prompt: str, **kwargs: Any) -> str:
        messages: list[dict[str, Any]] = []
        if self.system_prompt:
            messages.append({"role": "system", "content": self.system_prompt})
        messages.append({"role": "user", "content": prompt})
        response = self._parse(
            await self._post("/v1/chat/completions", self._body(messages, None, kwargs))
        )
        return response.content or ""

    async def complete_with_tools(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Any], **kwargs: Any
    ) -> LLMResponse:
        body = self._body([dict(m) for m in messages], tools, kwargs)
        return self._parse(await self._post("/v1/chat/completions", body))

    @staticmethod
    def _parse(data: dict[str, Any]) -> LLMResponse:
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
            error = data.get("error")
            detail = f": {error}" if error else ""
            raise LLMResponseError(f"reply has no choices{detail}", body=data)
        message = choices[0].get("message")
        if not isinstance(message, Mapping):
            raise LLMResponseError("reply's first choice has no message", body=data)
        content = message.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise LLMResponseError(
                f"message content must be text, got {type(content).__name__}", body=data
            )
        calls = []
        for index, call in enumerate(message.get("tool_calls") or []):
            function = call.get("function") if isinstance(call, Mapping) else None
            if not isinstance(function, Mapping) or not function.get("name"):
                raise LLMResponseError("malformed tool call in reply", body=data)
            calls.append(
                ToolCall(
                    id=str(call.get("id") or f"call_{index}"),
                    name=str(function["name"]),
                    args=decode_tool_arguments(function.get("arguments"), data),
                )
            )
        return LLMResponse(content=message_text(content), tool_calls=calls, raw=data)


# -- Anthropic ---------------------------------------------------------------------------------


def openai_to_anthropic_messages(
    messages: Sequence[Mapping[str, Any]],
) -> tuple[str | None, list[dict[str, Any]]]:
    """Convert OpenAI-format messages to Anthropic ``(system, messages)``.

    System (and developer) messages are joined into ``system``; assistant ``tool_calls``
    become ``tool_use`` blocks; ``role="tool"`` results become ``tool_result`` blocks of a user
    turn; consecutive turns of the same role are merged (the API wants alternating roles).
    """
    system_parts: list[str] = []
    converted: list[dict[str, Any]] = []

    def push(role: str, blocks: list[dict[str, Any]]) -> None:
        if converted and converted[-1]["role"] == role:
            converted[-1]["content"].extend(blocks)
        else:
            converted.append({"role": role, "content": list(blocks)})

    for message in messages:
        role = message.get("role")
        content = message.get("content")
        if role in ("system", "developer"):
            text = message_text(content)
            if text:
                system_parts.append(text)
            continue
        if role == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": str(message.get("tool_call_id", "")),
                "content": message_text(content),
            }
            push("user", [block])
            continue
        if role not in ("user", "assistant"):
            raise ValueError(f"unsupported message role {role!r}")
        blocks: list[dict[str, Any]] = []
        if isinstance(content, list):
            for part in content:
                if isinstance(part, Mapping) and part.get("type") in (None, "text"):
                    if part.get("text"):
                        blocks.append({"type": "text", "text": part["text"]})
                elif isinstance(part, Mapping):
                    blocks.append(dict(part))  # assume it is already an Anthropic block
        elif content:
            blocks.append({"type": "text", "text": str(content)})
        if role == "assistant":
            for call in message.get("tool_calls") or []:
                function = call.get("function", {})
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": str(call.get("id", "")),
                        "name": function.get("name", ""),
                        "input": decode_tool_arguments(function.get("arguments"), message),
                    }
                )
        if blocks:
            push(role, blocks)
    system = "\n\n".join(system_parts) if system_parts else None
    return system, converted


class AnthropicClient(HTTPChatClient):
    """A model behind the Anthropic Messages API (``POST {base}/v1/messages``).

    Same addressing, retry and error behaviour as `OpenAIClient`; messages and tools are
    given in OpenAI format and converted. HTTP 529 (overloaded) is retried like other 5xx.
    """

    DEFAULT_BASE_URL = "https://api.anthropic.com"
    ANTHROPIC_VERSION = "2023-06-01"
    DEFAULT_MAX_TOKENS = 4096  # the Messages API requires max_tokens

    def _headers(self) -> dict[str, str]:
        headers = super()._headers()
        headers.setdefault("anthropic-version", self.ANTHROPIC_VERSION)
        if self.api_key:
            headers.setdefault("x-api-key", self.api_key)
        return headers

    def _body(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Any] | None,
        kwargs: dict[str, Any],
    ) -> dict[str, Any]:
        kwargs = dict(kwargs)
        temperature, max_tokens = self._sampling(kwargs)
        system, converted = openai_to_anthropic_messages(messages)
        if self.system_prompt:
            system = self.system_prompt + ("\n\n" + system if system else "")
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": max_tokens,
            "messages": converted,
        }
        if system:
            body["system"] = system
        if temperature is not None:
            body["temperature"] = temperature
        if tools:
            body["tools"] = [to_anthropic_tool(tool) for tool in tools]
        body.update(kwargs)
        return body

    async def complete(self, prompt: str, **kwargs: Any) -> str:
        body = self._body([{"role": "user", "content": prompt}], None, kwargs)
        return (self._parse(await self._post("/v1/messages", body))).content or ""

    async def complete_with_tools(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Any], **kwargs: Any
    ) -> LLMResponse:
        return self._parse(await self._post("/v1/messages", self._body(messages, tools, kwargs)))

    @staticmethod
    def _parse(data: dict[str, Any]) -> LLMResponse:
        blocks = data.get("content")
        if not isinstance(blocks, list):
            error = data.get("error")
            detail = f": {error}" if error else ""
            raise LLMResponseError(f"reply has no content blocks{detail}", body=data)
        texts: list[str] = []
        calls: list[ToolCall] = []
        for block in blocks:
            if not isinstance(block, Mapping):
                raise LLMResponseError("malformed content block in reply", body=data)
            if block.get("type") == "text":
                texts.append(str(block.get("text", "")))
            elif block.get("type") == "tool_use":
                arguments = block.get("input")
                calls.append(
                    ToolCall(
                        id=str(block.get("id", "")),
                        name=str(block.get("name", "")),
                        args=decode_tool_arguments(arguments, data),
                    )
                )
        return LLMResponse(content="".join(texts), tool_calls=calls, raw=data)


# -- factory -----------------------------------------------------------------------------------


def create_llm_client(
    provider: str,
    model: str,
    api_key: str | None = None,
    *,
    base_url: str | None = None,
    system_prompt: str | None = None,
    temperature: float | None = 0.0,
    max_tokens: int = 4096,
    **kwargs: Any,
) -> LLMClient:
    """Make a client for ``provider`` (``"openai"`` -- any OpenAI-compatible server -- or
    ``"anthropic"``). Without ``api_key`` and ``base_url`` the key is read from
    ``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY``. Extra keyword arguments (``timeout_s``,
    ``max_retries``, ...) go to the client class."""
    name = provider.strip().lower()
    if name == "openai":
        cls: type[HTTPChatClient] = OpenAIClient
        env_key = "OPENAI_API_KEY"
    elif name == "anthropic":
        cls = AnthropicClient
        env_key = "ANTHROPIC_API_KEY"
    else:
        raise ValueError(f"unknown LLM provider {provider!r}; expected 'openai' or 'anthropic'")
    if api_key is None and base_url is None:
        api_key = os.environ.get(env_key)
    return cls(
        base_url,
        model=model,
        api_key=api_key,
        system_prompt=system_prompt,
        temperature=temperature,
        max_tokens=max_tokens,
        **kwargs,
    )
