"""Wire formats of the chat APIs that harnesses speak, shared by the model stand-in and the
capture proxy.

Everything is built from one neutral `Completion` (text, tool calls, stop reason, usage, token
ids, logprobs) so a reply produced once can be answered as an OpenAI chat completion or an
Anthropic message, whole or as server-sent events, and so the proxy can convert between the
two when the harness and the upstream disagree.
"""

from __future__ import annotations

import enum
import json
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from openenv.core.llm_client import (
    decode_tool_arguments,
    message_text,
    openai_to_anthropic_messages,
    to_anthropic_tool,
    to_openai_tool,
)

__all__ = [
    "APIType",
    "Completion",
    "CompletionToolCall",
    "anthropic_request_to_openai",
    "anthropic_sse",
    "detect",
    "error_body",
    "openai_request_to_anthropic",
    "openai_sse",
    "parse_anthropic_response",
    "parse_openai_response",
    "rough_token_count",
    "to_anthropic_message",
    "to_anthropic_stop_reason",
    "to_openai_chat_completion",
    "to_openai_finish_reason",
    "tool_calls_from",
]


class APIType(str, enum.Enum):
    """The dialect a request is written in."""

    ANTHROPIC = "anthropic"
    OPENAI_CHAT = "openai_chat"
    OPENAI_RESPONSES = "openai_responses"
    GOOGLE = "google"


def detect(path: str, headers: Mapping[str, str] | None = None, body: Any = None) -> APIType:
    """Which dialect a request speaks: by path first, then the ``anthropic-version`` header,
    then the body's shape (Anthropic has a top-level ``system`` or a ``max_tokens`` with
    content blocks; OpenAI Responses has ``input``; Google has ``contents``)."""
    lowered = path.lower()
    if lowered.rstrip("/").endswith("/messages") or "/messages/" in lowered:
        return APIType.ANTHROPIC
    if "chat/completions" in lowered:
        return APIType.OPENAI_CHAT
    if lowered.rstrip("/").endswith("/responses"):
        return APIType.OPENAI_RESPONSES
    if ":generatecontent" in lowered or ":streamgeneratecontent" in lowered:
        return APIType.GOOGLE
    if headers is not None and any(k.lower() == "anthropic-version" for k in headers):
        return APIType.ANTHROPIC
    if isinstance(body, Mapping):
        if "contents" in body:
            return APIType.GOOGLE
        if "input" in body and "messages" not in body:
            return APIType.OPENAI_RESPONSES
        if "system" in body and "messages" in body:
            return APIType.ANTHROPIC
        for message in body.get("messages") or []:
            content = message.get("content") if isinstance(message, Mapping) else None
            if isinstance(content, list) and any(
                isinstance(b, Mapping) and b.get("type") in ("tool_use", "tool_result")
                for b in content
            ):
                return APIType.ANTHROPIC
    return APIType.OPENAI_CHAT


# -- the neutral reply -----------------------------------------------------------------------


@dataclass
class CompletionToolCall:
    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass
class Completion:
    """One model reply, independent of the dialect it is answered in.

    ``stop_reason`` may be in either vocabulary (``stop``/``tool_calls``/``length`` or
    ``end_turn``/``tool_use``/``max_tokens``); None means "tool calls if any, else a normal end".
    """

    text: str = ""
    tool_calls: list[CompletionToolCall] = field(default_factory=list)
    stop_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model: str = "model"
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:24])
    prompt_token_ids: list[int] | None = None
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None


_TO_OPENAI = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "refusal": "content_filter",
}
_TO_ANTHROPIC = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}


def to_openai_finish_reason(completion: Completion) -> str:
    if completion.stop_reason is None:
        return "tool_calls" if completion.tool_calls else "stop"
    return _TO_OPENAI.get(completion.stop_reason, completion.stop_reason)


def to_anthropic_stop_reason(completion: Completion) -> str:
    if completion.stop_reason is None:
        return "tool_use" if completion.tool_calls else "end_turn"
    return _TO_ANTHROPIC.get(completion.stop_reason, completion.stop_reason)


def rough_token_count(value: Any) -> int:
    """About four characters a token: enough for usage numbers and ``count_tokens``."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return max(1, len(text) // 4)


# -- OpenAI chat completions -----------------------------------------------------------------


def _openai_logprobs(completion: Completion) -> dict[str, Any] | None:
    if completion.logprobs is None:
        return None
    ids = completion.token_ids or []
    content = []
    for index, logprob in enumerate(completion.logprobs):
        token = f"<{ids[index]}>" if index < len(ids) else ""
        content.append({"token": token, "logprob": logprob, "bytes": None, "top_logprobs": []})
    return {"content": content}


def _openai_tool_calls(completion: Completion) -> list[dict[str, Any]]:
    return [
        {
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
        }
        for call in completion.tool_calls
    ]


def _openai_usage(completion: Completion) -> dict[str, int]:
    return {
        "prompt_tokens": completion.prompt_tokens,
        "completion_tokens": completion.completion_tokens,
        "total_tokens": completion.prompt_tokens + completion.completion_tokens,
    }


def to_openai_chat_completion(completion: Completion) -> dict[str, Any]:
    """A ``chat.completion`` object; token ids where vLLM puts them (``return_token_ids``)."""
    message: dict[str, Any] = {"role": "assistant", "content": completion.text or None}
    if completion.tool_calls:
        message["tool_calls"] = _openai_tool_calls(completion)
    elif message["content"] is None:
        message["content"] = ""
    choice: dict[str, Any] = {
        "index": 0,
        "message": message,
        "finish_reason": to_openai_finish_reason(completion),
        "logprobs": _openai_logprobs(completion),
    }
    if completion.token_ids is not None:
        choice["token_ids"] = list(completion.token_ids)
    body: dict[str, Any] = {
        "id": f"chatcmpl-{completion.id}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": completion.model,
        "choices": [choice],
        "usage": _openai_usage(completion),
    }
    if completion.prompt_token_ids is not None:
        body["prompt_token_ids"] = list(completion.prompt_token_ids)
    return body


def _sse_data(payload: Any) -> str:
    return f"data: {json.dumps(payload)}\n\n"


def openai_sse(completion: Completion, *, include_usage: bool = True) -> Iterator[str]:
    """The reply as ``chat.completion.chunk`` events ending with ``data: [DONE]``."""
    base = {
        "id": f"chatcmpl-{completion.id}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": completion.model,
    }

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
        choice.update(extra)
        return _sse_data({**base, "choices": [choice]})

    yield chunk({"role": "assistant", "content": ""})
    if completion.text:
        extra: dict[str, Any] = {}
        logprobs = _openai_logprobs(completion)
        if logprobs is not None:
            extra["logprobs"] = logprobs
        if completion.token_ids is not None:
            extra["token_ids"] = list(completion.token_ids)
        middle = max(1, len(completion.text) // 2)
        yield chunk({"content": completion.text[:middle]}, **extra)
        if completion.text[middle:]:
            yield chunk({"content": completion.text[middle:]})
    for index, call in enumerate(completion.tool_calls):
        head = {"index": index, "id": call.id, "type": "function"}
        yield chunk({"tool_calls": [{**head, "function": {"name": call.name, "arguments": ""}}]})
        yield chunk(
            {
                "tool_calls": [
                    {"index": index, "function": {"arguments": json.dumps(call.arguments)}}
                ]
            }
        )
    yield chunk({}, to_openai_finish_reason(completion))
    if include_usage:
        yield _sse_data({**base, "choices": [], "usage": _openai_usage(completion)})
    yield "data: [DONE]\n\n"


def parse_openai_response(data: Mapping[str, Any]) -> Completion:
    """A ``chat.completion`` body (possibly vLLM's, with token ids) as a `Completion`;
    raises ValueError when it is not one."""
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        raise ValueError(f"reply has no choices: {str(data)[:200]}")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, Mapping):
        raise ValueError("reply's first choice has no message")
    calls = []
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping) or not function.get("name"):
            raise ValueError("malformed tool call in reply")
        calls.append(
            CompletionToolCall(
                id=str(call.get("id") or f"call_{index}"),
                name=str(function["name"]),
                arguments=decode_tool_arguments(function.get("arguments"), data),
            )
        )
    usage = data.get("usage") if isinstance(data.get("usage"), Mapping) else {}
    logprobs: list[float] | None = None
    content_logprobs = (choice.get("logprobs") or {}).get("content")
    if isinstance(content_logprobs, list):
        logprobs = [float(entry.get("logprob", 0.0)) for entry in content_logprobs]
    token_ids = choice.get("token_ids")
    prompt_ids = data.get("prompt_token_ids", choice.get("prompt_token_ids"))
    return Completion(
        text=message_text(message.get("content")),
        tool_calls=calls,
        stop_reason=choice.get("finish_reason"),
        prompt_tokens=int((usage or {}).get("prompt_tokens") or 0),
        completion_tokens=int((usage or {}).get("completion_tokens") or 0),
        model=str(data.get("model") or "model"),
        id=str(data.get("id") or uuid.uuid4().hex[:24]).removeprefix("chatcmpl-"),
        prompt_token_ids=list(prompt_ids) if isinstance(prompt_ids, list) else None,
        token_ids=list(token_ids) if isinstance(token_ids, list) else None,
        logprobs=logprobs,
    )


# -- Anthropic messages ----------------------------------------------------------------------


def _anthropic_blocks(completion: Completion) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if completion.text:
        blocks.append({"type": "text", "text": completion.text})
    for call in completion.tool_calls:
        blocks.append(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
        )
    return blocks


def to_anthropic_message(completion: Completion) -> dict[str, Any]:
    return {
        "id": f"msg_{completion.id}",
        "type": "message",
        "role": "assistant",
        "model": completion.model,
        "content": _anthropic_blocks(completion),
        "stop_reason": to_anthropic_stop_reason(completion),
        "stop_sequence": None,
        "usage": {
            "input_tokens": completion.prompt_tokens,
            "output_tokens": completion.completion_tokens,
        },
    }


def _sse_event(name: str, payload: dict[str, Any]) -> str:
    return f"event: {name}\ndata: {json.dumps({'type': name, **payload})}\n\n"


def anthropic_sse(completion: Completion) -> Iterator[str]:
    """The reply as the Messages API's event sequence (message_start ... message_stop)."""
    message = to_anthropic_message(completion)
    start = {**message, "content": [], "stop_reason": None}
    start["usage"] = {"input_tokens": completion.prompt_tokens, "output_tokens": 0}
    yield _sse_event("message_start", {"message": start})
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            yield _sse_event(
                "content_block_start",
                {"index": index, "content_block": {"type": "text", "text": ""}},
            )
            text = block["text"]
            middle = max(1, len(text) // 2)
            for piece in (text[:middle], text[middle:]):
                if piece:
                    delta = {"type": "text_delta", "text": piece}
                    yield _sse_event("content_block_delta", {"index": index, "delta": delta})
        else:
            head = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            yield _sse_event("content_block_start", {"index": index, "content_block": head})
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            yield _sse_event("content_block_delta", {"index": index, "delta": delta})
        yield _sse_event("content_block_stop", {"index": index})
    yield _sse_event(
        "message_delta",
        {
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": completion.completion_tokens},
        },
    )
    yield _sse_event("message_stop", {})


def parse_anthropic_response(data: Mapping[str, Any]) -> Completion:
    """A Messages API reply as a `Completion`; raises ValueError when it is not one."""
    blocks = data.get("content")
    if not isinstance(blocks, list):
        raise ValueError(f"reply has no content blocks: {str(data)[:200]}")
    texts: list[str] = []
    calls: list[CompletionToolCall] = []
    for block in blocks:
        if not isinstance(block, Mapping):
            raise ValueError("malformed content block in reply")
        if block.get("type") == "text":
            texts.append(str(block.get("text", "")))
        elif block.get("type") == "tool_use":
            calls.append(
                CompletionToolCall(
                    id=str(block.get("id", "")),
                    name=str(block.get("name", "")),
                    arguments=decode_tool_arguments(block.get("input"), data),
                )
            )
    usage = data.get("usage") if isinstance(data.get("usage"), Mapping) else {}
    return Completion(
        text="".join(texts),
        tool_calls=calls,
        stop_reason=data.get("stop_reason"),
        prompt_tokens=int((usage or {}).get("input_tokens") or 0),
        completion_tokens=int((usage or {}).get("output_tokens") or 0),
        model=str(data.get("model") or "model"),
        id=str(data.get("id") or uuid.uuid4().hex[:24]).removeprefix("msg_"),
    )


# -- request conversion ------------------------------------------------------------------------


def _anthropic_system_text(system: Any) -> str:
    if isinstance(system, list):
        return "\n\n".join(
            str(b.get("text", "")) if isinstance(b, Mapping) else str(b) for b in system
        )
    return str(system or "")


def anthropic_request_to_openai(body: Mapping[str, Any]) -> dict[str, Any]:
    """An Anthropic Messages request as an OpenAI chat-completions request (same model,
    sampling, tools; ``tool_use``/``tool_result`` blocks become tool calls / tool messages)."""
    messages: list[dict[str, Any]] = []
    system = _anthropic_system_text(body.get("system"))
    if system:
        messages.append({"role": "system", "content": system})
    for message in body.get("messages") or []:
        role = message.get("role")
        content = message.get("content")
        if isinstance(content, str):
            messages.append({"role": role, "content": content})
            continue
        texts: list[str] = []
        parts: list[dict[str, Any]] = []  # text and images, for a user turn
        calls: list[dict[str, Any]] = []
        results: list[dict[str, Any]] = []
        for block in content or []:
            kind = block.get("type")
            if kind == "text":
                texts.append(str(block.get("text", "")))
                parts.append({"type": "text", "text": texts[-1]})
            elif kind == "image" and isinstance(block.get("source"), Mapping):
                source = block["source"]
                url = source.get("url") or (
                    f"data:{source.get('media_type')};base64,{source.get('data', '')}"
                )
                parts.append({"type": "image_url", "image_url": {"url": url}})
            elif kind == "tool_use":
                calls.append(
                    {
                        "id": str(block.get("id", "")),
                        "type": "function",
                        "function": {
                            "name": block.get("name", ""),
                            "arguments": json.dumps(block.get("input") or {}),
                        },
                    }
                )
            elif kind == "tool_result":
                result = block.get("content")
                text = message_text(result) if not isinstance(result, str) else result
                if block.get("is_error"):
                    text = f"[error] {text}"
                results.append(
                    {
                        "role": "tool",
                        "tool_call_id": str(block.get("tool_use_id", "")),
                        "content": text,
                    }
                )
        messages.extend(results)  # tool results answer the previous assistant turn first
        if role == "assistant":
            converted: dict[str, Any] = {"role": "assistant", "content": "\n\n".join(texts) or None}
            if calls:
                converted["tool_calls"] = calls
            messages.append(converted)
        elif len(parts) == 1 and parts[0]["type"] == "text":
            messages.append({"role": role, "content": parts[0]["text"]})
        elif parts:  # several blocks (e.g. a reminder and the prompt) stay separate parts
            messages.append({"role": role, "content": parts})
    request: dict[str, Any] = {"model": body.get("model"), "messages": messages}
    for key in ("max_tokens", "temperature", "top_p"):
        if body.get(key) is not None:
            request[key] = body[key]
    if body.get("stop_sequences"):
        request["stop"] = list(body["stop_sequences"])
    tools = [t for t in body.get("tools") or [] if "input_schema" in t or "inputSchema" in t]
    if tools:
        request["tools"] = [to_openai_tool(tool) for tool in tools]
    choice = body.get("tool_choice")
    if isinstance(choice, Mapping):
        kind = choice.get("type")
        if kind == "any":
            request["tool_choice"] = "required"
        elif kind == "tool":
            request["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}
        elif kind in ("auto", "none"):
            request["tool_choice"] = kind
    return request


def openai_request_to_anthropic(body: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI chat-completions request as an Anthropic Messages request."""
    system, messages = openai_to_anthropic_messages(body.get("messages") or [])
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or 4096
    request: dict[str, Any] = {
        "model": body.get("model"),
        "max_tokens": max_tokens,
        "messages": messages,
    }
    if system:
        request["system"] = system
    for key in ("temperature", "top_p"):
        if body.get(key) is not None:
            request[key] = body[key]
    stop = body.get("stop")
    if stop:
        request["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    if body.get("tools"):
        request["tools"] = [to_anthropic_tool(tool) for tool in body["tools"]]
    return request


def error_body(dialect: APIType | str, status: int, message: str) -> dict[str, Any]:
    """An error body each dialect's SDKs understand."""
    if APIType(dialect) is APIType.ANTHROPIC:
        kind = {
            400: "invalid_request_error",
            401: "authentication_error",
            404: "not_found_error",
            429: "rate_limit_error",
        }.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}
    kind = {400: "invalid_request_error", 401: "invalid_api_key", 404: "not_found"}.get(
        status, "upstream_error" if status == 502 else "server_error"
    )
    return {"error": {"message": message, "type": kind, "param": None, "code": kind}}


def tool_calls_from(specs: Sequence[Mapping[str, Any]], id_prefix: str) -> list[CompletionToolCall]:
    """Tool calls given as ``{"name", "arguments", "id"?}`` (arguments a dict or JSON text)."""
    calls = []
    for index, spec in enumerate(specs):
        arguments = spec.get("arguments", spec.get("input", {}))
        if isinstance(arguments, str):
            arguments = json.loads(arguments) if arguments else {}
        calls.append(
            CompletionToolCall(
                id=str(spec.get("id") or f"{id_prefix}_{uuid.uuid4().hex[:12]}_{index}"),
                name=str(spec["name"]),
                arguments=dict(arguments),
            )
        )
    return calls
