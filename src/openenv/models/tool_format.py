"""Tool calls for a chat template that has none: the Hermes ``<tool_call>`` format.

SmolLM2's chat template renders only roles and text. So, as vLLM's ``hermes`` tool parser does
for models trained on that format, the server describes the request's tools in the system
message, shows earlier calls and results as tagged text, and reads the model's answer back:
every ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` block becomes an OpenAI tool
call. An answer whose blocks do not parse stays plain text (the caller sees exactly what the
model wrote, as with vLLM), so a malformed call is the agent's problem, never a server error.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from openenv.core.llm_client import message_text

__all__ = [
    "CALL_CLOSE",
    "CALL_OPEN",
    "ParsedAnswer",
    "call_is_complete",
    "messages_for_template",
    "parse_answer",
    "safe_prefix_length",
    "tools_system_text",
]

CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"


def tools_system_text(tools: Sequence[Mapping[str, Any]]) -> str:
    """The system text that offers ``tools`` (OpenAI function specs) to the model, with an
    example call of the first one (a small model copies the example's name)."""
    functions = [tool.get("function", tool) for tool in tools]
    specs = "\n".join(json.dumps(function, sort_keys=True) for function in functions)
    example = {
        "name": functions[0].get("name", "function_name"),
        "arguments": _placeholders(functions[0]),
    }
    return (
        "You can call functions to help with the user's request. Their signatures, one JSON "
        f"object a line:\n<tools>\n{specs}\n</tools>\n"
        "To call one, answer with a JSON object holding its name and arguments inside "
        f"{CALL_OPEN}{CALL_CLOSE} tags, for example:\n"
        f"{CALL_OPEN}\n{json.dumps(example)}\n{CALL_CLOSE}"
    )


_PLACEHOLDERS = {"string": "...", "integer": 0, "number": 0, "boolean": False, "array": []}


def _placeholders(function: Mapping[str, Any]) -> dict[str, Any]:
    parameters = function.get("parameters") or {}
    properties = parameters.get("properties") if isinstance(parameters, Mapping) else None
    if not isinstance(properties, Mapping):
        return {}
    return {
        name: _PLACEHOLDERS.get(str(spec.get("type")), None) if isinstance(spec, Mapping) else None
        for name, spec in properties.items()
    }


def _call_text(call: Mapping[str, Any]) -> str:
    function = call.get("function", call)
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            pass  # shown as the model wrote it
    payload = json.dumps({"name": function.get("name"), "arguments": arguments})
    return f"{CALL_OPEN}\n{payload}\n{CALL_CLOSE}"


def messages_for_template(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None
) -> list[dict[str, str]]:
    """OpenAI chat messages as plain ``{"role", "content"}`` text the template renders:
    content parts joined, assistant tool calls and tool results written in the tag format,
    and the tools' description added to the (first) system message."""
    plain: list[dict[str, str]] = []
    for message in messages:
        role = str(message.get("role") or "user")
        text = message_text(message.get("content"))
        if role == "assistant" and message.get("tool_calls"):
            calls = "\n".join(_call_text(call) for call in message["tool_calls"])
            text = f"{text}\n{calls}" if text else calls
        elif role == "tool":
            role, text = "user", f"<tool_response>\n{text}\n</tool_response>"
        elif role == "developer":
            role = "system"
        plain.append({"role": role, "content": text})
    if tools:
        offer = tools_system_text(tools)
        if plain and plain[0]["role"] == "system":
            plain[0] = {"role": "system", "content": f"{plain[0]['content']}\n\n{offer}"}
        else:
            plain.insert(0, {"role": "system", "content": offer})
    return plain


@dataclass
class ParsedAnswer:
    """The model's answer split into text (None when it is only calls) and tool calls
    (``{"id", "name", "arguments"}``)."""

    content: str | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


def parse_answer(text: str) -> ParsedAnswer:
    """Tool calls out of ``text``: each ``<tool_call>`` opens one JSON object (whatever follows
    it before the next tag, a closing tag cut off by the token limit included, is dropped, as
    vLLM's parser drops text after a call). All of them parse, or the whole answer stays text."""
    start = text.find(CALL_OPEN)
    if start < 0:
        return ParsedAnswer(text)
    calls: list[dict[str, Any]] = []
    for block in text[start:].split(CALL_OPEN)[1:]:
        call = _call_of(block)
        if call is None:
            return ParsedAnswer(text)
        calls.append(call)
    before = text[:start].rstrip()
    return ParsedAnswer(before or None, calls)


_DECODER = json.JSONDecoder()


def _call_of(block: str) -> dict[str, Any] | None:
    """The call whose JSON object starts ``block``, or None."""
    try:
        payload, _ = _DECODER.raw_decode(block.lstrip())
    except json.JSONDecodeError:
        return None
    if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
        return None
    arguments = payload.get("arguments", payload.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None
    if not isinstance(arguments, dict):
        return None
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "name": payload["name"], "arguments": arguments}


def call_is_complete(text: str) -> bool:
    """Whether ``text`` holds a tool call whose JSON object is closed (where a required call
    ends: the rest would be the model rambling on after it)."""
    start = text.find(CALL_OPEN)
    return start >= 0 and _call_of(text[start + len(CALL_OPEN) :]) is not None


def safe_prefix_length(text: str) -> int:
    """How much of ``text`` can be streamed as content now: everything before a tool call's
    opening tag, or before a tail that could still grow into one, less trailing white space
    (dropped before a call, as `parse_answer` drops it)."""
    cut = text.find(CALL_OPEN)
    if cut < 0:
        cut = len(text)
        for size in range(min(len(CALL_OPEN) - 1, len(text)), 0, -1):
            if CALL_OPEN.startswith(text[-size:]):
                cut = len(text) - size
                break
    return len(text[:cut].rstrip())
