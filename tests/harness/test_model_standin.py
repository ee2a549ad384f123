"""The model stand-in, driven by the official OpenAI and Anthropic SDKs over real HTTP."""

from __future__ import annotations

import json
import subprocess
import sys

import anthropic
import httpx
import openai
import pytest

from openenv.testing.model_standin import ModelStandIn, ScriptedReply, StandInRequest

BASH = {"name": "bash", "arguments": {"command": "ls -la"}}
TOOLS_OPENAI = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "run a command",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]
TOOLS_ANTHROPIC = [
    {
        "name": "bash",
        "description": "run a command",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
    }
]


def openai_client(standin: ModelStandIn) -> openai.OpenAI:
    return openai.OpenAI(base_url=standin.url + "/v1", api_key="test-key", max_retries=0)


def anthropic_client(standin: ModelStandIn) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=standin.url, api_key="test-key", max_retries=0)


def test_openai_sdk_tool_call_then_text_with_token_ids() -> None:
    script = [
        ScriptedReply(tool_calls=[BASH]),
        ScriptedReply(text="all done", token_ids=[7, 8, 9], logprobs=[-0.1, -0.2, -0.3]),
    ]
    with ModelStandIn(script) as standin:
        client = openai_client(standin)
        messages = [{"role": "user", "content": "list files"}]
        first = client.chat.completions.create(
            model="m",
            messages=messages,
            tools=TOOLS_OPENAI,
        )
        choice = first.choices[0]
        assert choice.finish_reason == "tool_calls"
        call = choice.message.tool_calls[0]
        assert call.function.name == "bash"
        assert json.loads(call.function.arguments) == {"command": "ls -la"}
        assert first.usage is not None and first.usage.prompt_tokens > 0

        second = client.chat.completions.create(model="m", messages=messages, logprobs=True)
        assert second.choices[0].message.content == "all done"
        assert second.choices[0].finish_reason == "stop"
        logprobs = second.choices[0].logprobs
        assert logprobs is not None and [t.logprob for t in logprobs.content or []] == [
            -0.1,
            -0.2,
            -0.3,
        ]
        assert second.model_dump()["choices"][0]["token_ids"] == [7, 8, 9]

    assert [r.dialect for r in standin.requests] == ["openai", "openai"]
    assert standin.requests[0].body["messages"] == messages
    assert standin.requests[0].headers["authorization"] == "Bearer test-key"


def test_openai_sdk_streaming_text_and_tool_call() -> None:
    script = [
        ScriptedReply(text="hello there"),
        ScriptedReply(text="let me look", tool_calls=[BASH]),
    ]
    with ModelStandIn(script) as standin:
        client = openai_client(standin)
        stream = client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == "hello there"
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0

        with client.chat.completions.stream(
            model="m",
            messages=[{"role": "user", "content": "go"}],
            tools=TOOLS_OPENAI,
        ) as events:
            final = events.get_final_completion()
        message = final.choices[0].message
        assert message.content == "let me look"
        assert final.choices[0].finish_reason == "tool_calls"
        call = message.tool_calls[0]
        assert call.function.name == "bash"
        assert json.loads(call.function.arguments) == BASH["arguments"]


def test_anthropic_sdk_messages_whole_and_streamed() -> None:
    script = [
        ScriptedReply(text="checking", tool_calls=[BASH]),
        ScriptedReply(text="finished"),
        ScriptedReply(text="streamed text", tool_calls=[BASH]),
    ]
    with ModelStandIn(script) as standin:
        client = anthropic_client(standin)
        kwargs = {"model": "claude-x", "max_tokens": 100, "tools": TOOLS_ANTHROPIC}
        first = client.messages.create(
            messages=[{"role": "user", "content": "list"}],
            **kwargs,
        )
        assert first.stop_reason == "tool_use"
        assert [b.type for b in first.content] == ["text", "tool_use"]
        tool_use = first.content[1]
        assert tool_use.name == "bash" and tool_use.input == BASH["arguments"]
        assert tool_use.id.startswith("toolu_")
        assert first.usage.input_tokens > 0 and first.usage.output_tokens > 0

        second = client.messages.create(
            messages=[{"role": "user", "content": "list"}],
            **kwargs,
        )
        assert second.stop_reason == "end_turn" and second.content[0].text == "finished"

        with client.messages.stream(
            messages=[{"role": "user", "content": "go"}],
            **kwargs,
        ) as stream:
            texts = list(stream.text_stream)
            final = stream.get_final_message()
        assert "".join(texts) == "streamed text"
        assert final.stop_reason == "tool_use"
        assert final.content[1].input == BASH["arguments"]

        tokens = client.messages.count_tokens(
            model="claude-x", messages=[{"role": "user", "content": "how many tokens is this"}]
        )
        assert tokens.input_tokens > 0
        models = client.models.list()
        assert [m.id for m in models.data] == ["standin-model"]

    assert [r.dialect for r in standin.requests] == ["anthropic"] * 3
    headers = standin.requests[0].headers
    assert "anthropic-version" in headers
    # The SDK sends the key as x-api-key (1.x) or as a Bearer token (2.x).
    assert "test-key" in (headers.get("x-api-key"), headers.get("authorization", "")[7:])


def test_exhausted_script_answers_500_and_keeps_serving() -> None:
    with ModelStandIn([ScriptedReply(text="only one")]) as standin:
        client = openai_client(standin)
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}])
        with pytest.raises(openai.InternalServerError, match="script exhausted"):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "b"}])
        assert httpx.get(standin.url + "/v1/models").status_code == 200
        assert standin.remaining == 0


def test_callable_script_answers_side_requests_differently() -> None:
    def script(request: StandInRequest) -> ScriptedReply:
        if request.body.get("max_tokens") == 1:  # e.g. a harness's quota probe
            return ScriptedReply(text="ok")
        return ScriptedReply(text=f"turn for {request.body['messages'][-1]['content']}")

    with ModelStandIn(script) as standin:
        client = anthropic_client(standin)
        probe = client.messages.create(
            model="m", max_tokens=1, messages=[{"role": "user", "content": "quota"}]
        )
        turn = client.messages.create(
            model="m", max_tokens=50, messages=[{"role": "user", "content": "task"}]
        )
        assert probe.content[0].text == "ok"
        assert turn.content[0].text == "turn for task"
        assert standin.remaining is None


def test_bad_body_is_a_clear_400() -> None:
    with ModelStandIn([]) as standin:
        reply = httpx.post(standin.url + "/v1/messages", content=b"not json")
        assert reply.status_code == 400
        assert reply.json()["error"]["type"] == "invalid_request_error"


def test_command_line_serves_a_json_script(tmp_path) -> None:
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([{"text": "from the file"}]))
    process = subprocess.Popen(
        [sys.executable, "-m", "openenv.testing.model_standin", "--script", str(script)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        reply = httpx.post(
            url + "/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert reply.json()["choices"][0]["message"]["content"] == "from the file"
    finally:
        process.terminate()
        process.wait(10)
    assert process.returncode == 0
