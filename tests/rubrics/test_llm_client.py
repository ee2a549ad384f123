"""The real OpenAI-compatible and Anthropic clients against a local stand-in server.

The real services are paid and unreachable from the test machines, so each test starts a
small OpenAI-/Anthropic-compatible HTTP server on a loopback port (tests/rubrics/fake_llm.py)
and runs the unmodified client code -- httpx, retries, backoff, error mapping -- against it.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from openenv.core.llm_client import (
    AnthropicClient,
    LLMClient,
    LLMResponse,
    LLMResponseError,
    LLMStatusError,
    LLMTimeoutError,
    LLMUnavailableError,
    OpenAIClient,
    ToolCall,
    create_llm_client,
)

from .fake_llm import FakeLLMServer, Reply, anthropic_reply, closed_port, meeting, openai_reply

FAST = {"backoff_base_s": 0.001, "backoff_max_s": 0.05}

MCP_TOOL = {
    "name": "move",
    "description": "Make a move",
    "inputSchema": {"type": "object", "properties": {"square": {"type": "string"}}},
}


def openai(server: FakeLLMServer, **kwargs: object) -> OpenAIClient:
    options = {"model": "judge-model", **FAST, **kwargs}
    return OpenAIClient(server.url, **options)  # type: ignore[arg-type]


# -- OpenAI-compatible: success and request shape -------------------------------------------


async def test_complete_success_and_request_body(llm_server: FakeLLMServer) -> None:
    llm_server.queue(openai_reply("Score: 8/10"))
    async with openai(llm_server, api_key="sk-test", system_prompt="Be strict.") as client:
        assert await client.complete("Rate this.", stop=["\n\n"]) == "Score: 8/10"
    (request,) = llm_server.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.body == {
        "model": "judge-model",
        "messages": [
            {"role": "system", "content": "Be strict."},
            {"role": "user", "content": "Rate this."},
        ],
        "max_tokens": 256,
        "temperature": 0.0,
        "stop": ["\n\n"],
    }


async def test_no_api_key_sends_no_authorization(llm_server: FakeLLMServer) -> None:
    client = openai(llm_server)
    await client.complete("hi", temperature=0.5, max_tokens=7)
    request = llm_server.requests[0]
    assert "authorization" not in request.headers
    assert request.body["temperature"] == 0.5 and request.body["max_tokens"] == 7
    await client.aclose()


async def test_reasoning_models_use_max_completion_tokens(llm_server: FakeLLMServer) -> None:
    client = OpenAIClient(llm_server.url, model="o3-mini", max_tokens=99)
    await client.complete("hi")
    body = llm_server.requests[0].body
    assert body["max_completion_tokens"] == 99
    assert "max_tokens" not in body and "temperature" not in body
    await client.aclose()


@pytest.mark.parametrize(
    ("args", "kwargs", "expected"),
    [
        (("http://h:8000",), {}, "http://h:8000"),
        (("http://h:8000/v1/",), {}, "http://h:8000/v1"),  # requests still go to /v1/...
        (("http://h:8000", 8000, "m"), {}, "http://h:8000"),  # the URL's own port
        (("localhost:8000",), {}, "http://localhost:8000"),
        (("http://localhost", 8000, "m"), {}, "http://localhost:8000"),  # OpenEnv-style
        ((), {"endpoint": "localhost", "port": 9}, "http://localhost:9"),
        ((), {}, "https://api.openai.com"),
    ],
)
def test_base_url_forms(args: tuple, kwargs: dict, expected: str) -> None:
    options = {"model": "m", **kwargs} if len(args) < 3 else kwargs
    assert OpenAIClient(*args, **options).base_url == expected


@pytest.mark.parametrize(
    ("args", "kwargs", "endpoint", "port"),
    [
        (("http://localhost", 8000, "m"), {}, "http://localhost", 8000),  # OpenEnv-style
        (("http://localhost:8000/v1", None, "m"), {}, "http://localhost:8000/v1", None),
        ((), {"endpoint": "http://h", "port": 9, "model": "m"}, "http://h", 9),
        (("http://h:8000",), {"model": "m"}, "http://h:8000", None),
        ((), {"model": "m"}, "https://api.openai.com", None),
    ],
)
def test_endpoint_and_port_attributes(args: tuple, kwargs: dict, endpoint: str, port: Any) -> None:
    client = OpenAIClient(*args, **kwargs)
    assert (client.endpoint, client.port) == (endpoint, port)


async def test_a_client_implementing_only_complete() -> None:
    class Echo(LLMClient):  # as OpenEnv's LLMClient docstring says: implement complete()
        async def complete(self, prompt: str, **kwargs: Any) -> str:
            return prompt

    client = Echo("http://localhost", 8000)
    assert (client.endpoint, client.port, client.base_url) == (
        "http://localhost",
        8000,
        "http://localhost:8000",
    )
    assert await client.complete("hi") == "hi"
    with pytest.raises(NotImplementedError, match="Echo does not support tool calling"):
        await client.complete_with_tools([{"role": "user", "content": "hi"}], [])
    assert Echo("http://localhost:8000/v1", None).base_url == "http://localhost:8000/v1"
    with pytest.raises(AttributeError):
        _ = Echo().base_url  # no endpoint: no URL to speak of


def test_constructor_validation() -> None:
    with pytest.raises(ValueError, match="model"):
        OpenAIClient("http://h")
    with pytest.raises(ValueError):
        OpenAIClient("http://h", model="m", endpoint="http://x")
    with pytest.raises(ValueError):
        OpenAIClient(model="m", port=80)
    with pytest.raises(ValueError, match="conflicts"):
        OpenAIClient("http://h:8000", 9000, "m")


async def test_tool_calls_round_trip(llm_server: FakeLLMServer) -> None:
    llm_server.queue(
        openai_reply(
            None,
            tool_calls=[
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "move", "arguments": '{"square": "e4"}'},
                }
            ],
        )
    )
    client = openai(llm_server)
    messages = [{"role": "user", "content": "Your move."}]
    response = await client.complete_with_tools(messages, [MCP_TOOL], tool_choice="auto")
    assert response.content == ""  # as OpenEnv's LLMResponse
    assert response.tool_calls == [ToolCall(id="call_1", name="move", args={"square": "e4"})]
    body = llm_server.requests[0].body
    assert body["tool_choice"] == "auto"
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "move",
                "description": "Make a move",
                "parameters": MCP_TOOL["inputSchema"],
            },
        }
    ]
    message = response.to_message_dict()
    assert message["role"] == "assistant"
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"square": "e4"}
    await client.aclose()


async def test_union_tool_schemas_are_flattened(llm_server: FakeLLMServer) -> None:
    tool = {
        "name": "act",
        "inputSchema": {
            "anyOf": [
                {"type": "object", "properties": {"a": {}, "id": {}}, "required": ["id", "a"]},
                {"type": "object", "properties": {"b": {}, "id": {}}, "required": ["id"]},
            ]
        },
    }
    client = openai(llm_server)
    await client.complete_with_tools([{"role": "user", "content": "go"}], [tool])
    parameters = llm_server.requests[0].body["tools"][0]["function"]["parameters"]
    assert parameters == {
        "type": "object",
        "properties": {"a": {}, "id": {}, "b": {}},
        "required": ["id"],
    }
    await client.aclose()


def test_to_message_dict_without_tools() -> None:
    assert LLMResponse(content="hi").to_message_dict() == {"role": "assistant", "content": "hi"}


# -- OpenAI-compatible: failures -------------------------------------------------------------


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every delay given to `asyncio.sleep` during the test (the sleeps still happen)."""
    real_sleep = asyncio.sleep
    delays: list[float] = []

    async def recording_sleep(delay: float, *args: object, **kwargs: object) -> object:
        delays.append(delay)
        return await real_sleep(delay, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(asyncio, "sleep", recording_sleep)
    return delays


async def test_429_then_success_honours_retry_after(
    llm_server: FakeLLMServer, sleeps: list[float]
) -> None:
    llm_server.queue(
        Reply(429, {"error": {"message": "rate limited"}}, headers={"Retry-After": "0.3"}),
        openai_reply("Score: 0.9"),
    )
    client = openai(llm_server, backoff_max_s=5.0)
    assert await client.complete("hi") == "Score: 0.9"
    assert 0.3 in sleeps  # waited as told, not the 1 ms backoff
    assert len(llm_server.requests) == 2
    await client.aclose()


async def test_retry_after_ms_header(llm_server: FakeLLMServer, sleeps: list[float]) -> None:
    llm_server.queue(Reply(503, "busy", headers={"retry-after-ms": "200"}), openai_reply("ok"))
    client = openai(llm_server, backoff_max_s=5.0)
    assert await client.complete("hi") == "ok"
    assert 0.2 in sleeps
    await client.aclose()


async def test_5xx_exhausting_retries_raises_unavailable(llm_server: FakeLLMServer) -> None:
    llm_server.queue(*[Reply(500, {"error": "internal"}) for _ in range(4)])
    client = openai(llm_server, max_retries=3)
    with pytest.raises(LLMUnavailableError) as info:
        await client.complete("hi")
    assert info.value.status_code == 500 and info.value.attempts == 4
    assert "HTTP 500" in str(info.value)
    assert len(llm_server.requests) == 4
    await client.aclose()


async def test_transient_5xx_recovers(llm_server: FakeLLMServer) -> None:
    llm_server.queue(Reply(502, "bad gateway"), Reply(500, "oops"), openai_reply("fine"))
    client = openai(llm_server)
    assert await client.complete("hi") == "fine"
    assert len(llm_server.requests) == 3
    await client.aclose()


async def test_client_errors_are_not_retried(llm_server: FakeLLMServer) -> None:
    llm_server.queue(Reply(401, {"error": {"message": "bad key"}}))
    client = openai(llm_server)
    with pytest.raises(LLMStatusError) as info:
        await client.complete("hi")
    assert info.value.status_code == 401 and "bad key" in info.value.body
    assert len(llm_server.requests) == 1
    await client.aclose()


async def test_unreachable_endpoint_raises_unavailable() -> None:
    client = OpenAIClient(f"http://127.0.0.1:{closed_port()}", model="m", max_retries=2, **FAST)
    with pytest.raises(LLMUnavailableError) as info:
        await client.complete("hi")
    assert not isinstance(info.value, LLMTimeoutError)
    assert info.value.attempts == 3 and "cannot reach" in str(info.value)
    await client.aclose()


async def test_timeout_raises_timeout_error(llm_server: FakeLLMServer) -> None:
    # Hung replies: a client that waited for them would hang until the test times out.
    llm_server.queue(Reply(200, {}, hang=True), Reply(200, {}, hang=True))
    client = openai(llm_server, timeout_s=0.2, max_retries=1)
    with pytest.raises(LLMTimeoutError) as info:
        await client.complete("hi")
    assert isinstance(info.value, LLMUnavailableError)
    assert info.value.attempts == 2
    assert len(llm_server.requests) == 2
    await client.aclose()


async def test_timeout_then_success(llm_server: FakeLLMServer) -> None:
    llm_server.queue(Reply(200, {}, hang=True), openai_reply("late but fine"))
    # The timeout is per attempt: long enough for the second reply on a loaded machine.
    client = openai(llm_server, timeout_s=2.0)
    assert await client.complete("hi") == "late but fine"
    await client.aclose()


@pytest.mark.parametrize(
    "reply",
    [
        Reply(200, "this is not json"),
        Reply(200, {"object": "chat.completion", "choices": []}),
        Reply(200, {"choices": [{"index": 0}]}),
        Reply(200, {"choices": [{"message": {"content": 42}}]}),
        Reply(200, [1, 2]),
        Reply(
            200,
            {
                "choices": [
                    {"message": {"tool_calls": [{"function": {"name": "f", "arguments": "{"}}]}}
                ]
            },
        ),
    ],
)
async def test_malformed_replies_raise_response_error(
    llm_server: FakeLLMServer, reply: Reply
) -> None:
    llm_server.queue(reply)
    client = openai(llm_server)
    with pytest.raises(LLMResponseError):
        await client.complete("hi")
    assert len(llm_server.requests) == 1  # not retried
    await client.aclose()


async def test_concurrent_requests_share_the_client(llm_server: FakeLLMServer) -> None:
    all_four = meeting(4)  # sent one after the other, the first is never answered
    llm_server.respond = lambda request: Reply(
        200, openai_reply(request.body["messages"][-1]["content"]).body, meet=all_four
    )
    client = openai(llm_server)
    answers = await asyncio.gather(*(client.complete(f"q{i}") for i in range(4)))
    assert answers == ["q0", "q1", "q2", "q3"]
    await client.aclose()


def test_client_works_across_event_loops(llm_server: FakeLLMServer) -> None:
    client = openai(llm_server)
    assert asyncio.run(client.complete("one")) == "Score: 1/1"
    assert asyncio.run(client.complete("two")) == "Score: 1/1"  # a fresh loop: a fresh pool


# -- Anthropic -----------------------------------------------------------------------------


def anthropic(server: FakeLLMServer, **kwargs: object) -> AnthropicClient:
    options = {"model": "claude-test", "api_key": "ak-test", **FAST, **kwargs}
    return AnthropicClient(server.url, **options)  # type: ignore[arg-type]


async def test_anthropic_complete(llm_server: FakeLLMServer) -> None:
    llm_server.queue(anthropic_reply([{"type": "text", "text": "Rating: 7/10"}]))
    client = anthropic(llm_server, system_prompt="You are a judge.", max_tokens=64)
    assert await client.complete("Rate it.") == "Rating: 7/10"
    (request,) = llm_server.requests
    assert request.path == "/v1/messages"
    assert request.headers["x-api-key"] == "ak-test"
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in request.headers
    assert request.body == {
        "model": "claude-test",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Rate it."}]}],
        "system": "You are a judge.",
        "temperature": 0.0,
    }
    await client.aclose()


async def test_anthropic_converts_openai_messages_and_tools(llm_server: FakeLLMServer) -> None:
    llm_server.queue(
        anthropic_reply(
            [
                {"type": "text", "text": "Moving."},
                {"type": "tool_use", "id": "tu_2", "name": "move", "input": {"square": "d4"}},
            ]
        )
    )
    first = LLMResponse(
        content="Let me move.", tool_calls=[ToolCall("tu_1", "move", {"square": "e4"})]
    )
    messages = [
        {"role": "system", "content": "Play chess."},
        {"role": "user", "content": "Your move."},
        first.to_message_dict(),
        {"role": "tool", "tool_call_id": "tu_1", "content": "ok"},
        {"role": "user", "content": "Again."},
    ]
    client = anthropic(llm_server)
    response = await client.complete_with_tools(messages, [MCP_TOOL])
    assert response.content == "Moving."
    assert response.tool_calls == [ToolCall("tu_2", "move", {"square": "d4"})]
    body = llm_server.requests[0].body
    assert body["system"] == "Play chess."
    assert body["tools"] == [
        {"name": "move", "description": "Make a move", "input_schema": MCP_TOOL["inputSchema"]}
    ]
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Your move."}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me move."},
                {"type": "tool_use", "id": "tu_1", "name": "move", "input": {"square": "e4"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "tu_1", "content": "ok"},
                {"type": "text", "text": "Again."},
            ],
        },
    ]
    await client.aclose()


async def test_anthropic_retries_overloaded_then_succeeds(llm_server: FakeLLMServer) -> None:
    llm_server.queue(
        Reply(529, {"type": "error", "error": {"type": "overloaded_error"}}),
        Reply(429, {"type": "error"}, headers={"retry-after": "0"}),
        anthropic_reply([{"type": "text", "text": "done"}]),
    )
    client = anthropic(llm_server)
    assert await client.complete("hi") == "done"
    assert len(llm_server.requests) == 3
    await client.aclose()


async def test_anthropic_failures(llm_server: FakeLLMServer) -> None:
    llm_server.queue(*[Reply(500, "down") for _ in range(2)])
    client = anthropic(llm_server, max_retries=1)
    with pytest.raises(LLMUnavailableError) as info:
        await client.complete("hi")
    assert info.value.status_code == 500 and info.value.attempts == 2
    llm_server.queue(Reply(200, {"type": "message", "content": "oops"}))
    with pytest.raises(LLMResponseError):
        await client.complete("hi")
    llm_server.queue(Reply(400, {"type": "error", "error": {"message": "bad"}}))
    with pytest.raises(LLMStatusError):
        await client.complete("hi")
    await client.aclose()
    unreachable = AnthropicClient(f"http://127.0.0.1:{closed_port()}", model="m", max_retries=0)
    with pytest.raises(LLMUnavailableError):
        await unreachable.complete("hi")


# -- factory ---------------------------------------------------------------------------------


def test_create_llm_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "from-env")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "anthropic-env")
    official = create_llm_client("OpenAI", "gpt-4o-mini", max_retries=1)
    assert isinstance(official, OpenAIClient)
    assert official.base_url == "https://api.openai.com" and official.api_key == "from-env"
    assert official.max_tokens == 4096 and official.max_retries == 1
    local = create_llm_client("openai", "qwen", base_url="http://127.0.0.1:1")
    assert local.api_key is None  # a key for the official API never goes to another host
    claude = create_llm_client("anthropic", "claude-x", "explicit")
    assert isinstance(claude, AnthropicClient) and claude.api_key == "explicit"
    assert claude.base_url == "https://api.anthropic.com"
    with pytest.raises(ValueError, match="unknown LLM provider"):
        create_llm_client("cohere", "m")
