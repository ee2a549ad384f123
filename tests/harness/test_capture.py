"""The capture proxy between real SDK clients and the model stand-in (which stands in for the
trainer's model endpoint), over real HTTP."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import anthropic
import httpx
import openai
import pytest

from openenv.core.harness.capture import APIType, CaptureServer, ModelCall, detect
from openenv.core.harness.events import HarnessEventType
from openenv.testing.model_standin import ModelStandIn, ScriptedReply

BASH = {"name": "bash", "arguments": {"command": "ls"}}
ANTHROPIC_TOOLS = [
    {
        "name": "bash",
        "description": "run a command",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
    }
]
OPENAI_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "run a command",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]


@pytest.fixture
def standin_replies() -> list[ScriptedReply]:
    return [
        ScriptedReply(
            tool_calls=[BASH], token_ids=[11, 12], logprobs=[-0.5, -0.25], prompt_token_ids=[1, 2]
        ),
        ScriptedReply(text="done", token_ids=[13], logprobs=[-0.125], prompt_token_ids=[1, 2, 3]),
    ]


@pytest.fixture
def standin(standin_replies: list[ScriptedReply]) -> Iterator[ModelStandIn]:
    with ModelStandIn(standin_replies) as server:
        yield server


def capture_for(standin: ModelStandIn, **options) -> CaptureServer:
    return CaptureServer(llm_url=standin.url, model="policy", upstream_retries=0, **options)


@pytest.mark.parametrize("stream", [False, True])
def test_openai_harness_calls_recorded_with_token_ids(standin: ModelStandIn, stream: bool) -> None:
    live: list[ModelCall] = []
    with capture_for(standin, on_call=live.append) as capture:
        capture.register_session("ep-1")
        client = openai.OpenAI(base_url=capture.url + "/v1", api_key="ep-1", max_retries=0)
        messages = [{"role": "user", "content": "list files"}]
        if stream:
            with client.chat.completions.stream(
                model="agent-model", messages=messages, tools=OPENAI_TOOLS
            ) as events:
                first = events.get_final_completion()
            with client.chat.completions.stream(model="agent-model", messages=messages) as events:
                second = events.get_final_completion()
        else:
            first = client.chat.completions.create(
                model="agent-model", messages=messages, tools=OPENAI_TOOLS
            )
            second = client.chat.completions.create(model="agent-model", messages=messages)
        call = first.choices[0].message.tool_calls[0]
        assert call.function.name == "bash"
        assert json.loads(call.function.arguments) == BASH["arguments"]
        assert second.choices[0].message.content == "done"

        calls = capture.calls("ep-1")
        assert live == calls
        assert [c.dialect for c in calls] == ["openai_chat", "openai_chat"]
        assert calls[0].request_messages == messages
        assert calls[0].tools[0]["function"]["name"] == "bash"
        assert calls[0].tool_calls[0]["name"] == "bash"
        assert calls[0].tool_calls[0]["arguments"] == BASH["arguments"]
        assert calls[0].prompt_token_ids == [1, 2]
        assert calls[0].completion_token_ids == [11, 12]
        assert calls[0].logprobs == [-0.5, -0.25]
        assert calls[1].response_text == "done" and calls[1].stop_reason == "stop"
        assert all(c.streamed is stream and c.error is None for c in calls)
        assert capture.drain("ep-1") == calls and capture.calls("ep-1") == []

    # Upstream got the trainer's model name, no streaming, and the token-ids flags.
    upstream = standin.requests[0].body
    assert upstream["model"] == "policy" and "stream" not in upstream
    assert upstream["logprobs"] is True and upstream["return_token_ids"] is True
    assert upstream["top_logprobs"] == 0
    assert "ep-1" not in json.dumps(standin.requests[0].headers)


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_harness_converted_to_openai_upstream(
    standin: ModelStandIn, stream: bool
) -> None:
    with capture_for(standin, upstream_api="openai_chat") as capture:
        capture.register_session("ep-a")
        client = anthropic.Anthropic(base_url=capture.url, api_key="ep-a", max_retries=0)
        kwargs = {
            "model": "claude-x",
            "max_tokens": 200,
            "tools": ANTHROPIC_TOOLS,
            "system": "be brief",
        }
        messages = [{"role": "user", "content": "list files"}]
        if stream:
            with client.messages.stream(messages=messages, **kwargs) as events:
                first = events.get_final_message()
        else:
            first = client.messages.create(messages=messages, **kwargs)
        assert first.stop_reason == "tool_use"
        tool_use = first.content[0]
        assert tool_use.type == "tool_use" and tool_use.input == BASH["arguments"]
        followup = [
            *messages,
            {"role": "assistant", "content": [block.model_dump() for block in first.content]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": tool_use.id, "content": "a.txt"}
                ],
            },
        ]
        second = client.messages.create(messages=followup, **kwargs)
        assert second.content[0].text == "done" and second.stop_reason == "end_turn"

        calls = capture.calls("ep-a")
        assert [c.dialect for c in calls] == ["anthropic", "anthropic"]
        assert [c.upstream_dialect for c in calls] == ["openai_chat", "openai_chat"]
        assert calls[0].completion_token_ids == [11, 12]
        assert calls[0].stop_reason == "tool_use"
        assert calls[1].request_messages[0] == {"role": "system", "content": "be brief"}
        assert calls[1].request_messages[-1]["role"] == "tool"

    # The stand-in (the "upstream") was spoken to in OpenAI chat format.
    assert [r.dialect for r in standin.requests] == ["openai", "openai"]
    converted = standin.requests[1].body["messages"]
    assert [m["role"] for m in converted] == ["system", "user", "assistant", "tool"]
    assert converted[2]["tool_calls"][0]["function"]["name"] == "bash"
    assert converted[3] == {"role": "tool", "tool_call_id": tool_use.id, "content": "a.txt"}
    assert standin.requests[0].body["tools"][0]["function"]["name"] == "bash"


def test_anthropic_harness_forwarded_as_anthropic(standin: ModelStandIn) -> None:
    with capture_for(standin) as capture:
        capture.register_session("ep-b")
        client = anthropic.Anthropic(base_url=capture.url, api_key="ep-b", max_retries=0)
        reply = client.messages.create(
            model="claude-x", max_tokens=50, messages=[{"role": "user", "content": "go"}]
        )
        assert reply.content[0].name == "bash"
        assert (
            client.messages.count_tokens(
                model="claude-x", messages=[{"role": "user", "content": "count me"}]
            ).input_tokens
            > 0
        )
    assert [r.dialect for r in standin.requests] == ["anthropic"]
    assert standin.requests[0].body["model"] == "policy"
    assert "return_token_ids" not in standin.requests[0].body
    assert capture.calls("ep-b")[0].upstream_dialect == "anthropic"


def test_unknown_session_key_is_refused(standin: ModelStandIn) -> None:
    with capture_for(standin) as capture:
        client = openai.OpenAI(base_url=capture.url + "/v1", api_key="nobody", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        claude = anthropic.Anthropic(base_url=capture.url, api_key="nobody", max_retries=0)
        with pytest.raises(anthropic.AuthenticationError):
            claude.messages.create(
                model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}]
            )
        assert standin.requests == [] and capture.calls("nobody") == []
        assert httpx.get(capture.url + "/health").status_code == 200


def test_upstream_down_is_a_502_and_a_recorded_error() -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    live: list[ModelCall] = []
    with CaptureServer(llm_url=dead, upstream_retries=0, on_call=live.append) as capture:
        capture.register_session("ep-x")
        client = openai.OpenAI(base_url=capture.url + "/v1", api_key="ep-x", max_retries=0)
        with pytest.raises(openai.APIStatusError) as caught:
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x"}], stream=True
            )
        assert caught.value.status_code == 502
        claude = anthropic.Anthropic(base_url=capture.url, api_key="ep-x", max_retries=0)
        with pytest.raises(anthropic.APIStatusError) as failed:
            claude.messages.create(
                model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}]
            )
        assert failed.value.status_code == 502
        calls = capture.calls("ep-x")
        assert [c.status_code for c in calls] == [502, 502]
        assert all(c.error and "cannot reach" in c.error for c in calls)
        assert all(c.response_text == "" and c.tool_calls == [] for c in calls)
        events = calls[0].to_harness_events()
        assert [e.type for e in events] == [HarnessEventType.LLM_REQUEST, HarnessEventType.ERROR]
        assert live == calls


def test_harness_events_and_sessions_route(standin: ModelStandIn) -> None:
    with capture_for(standin) as capture:
        capture.register_session("ep-r")
        httpx.post(
            capture.url + "/v1/chat/completions",
            headers={"authorization": "Bearer ep-r"},
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        ).raise_for_status()
        listed = httpx.get(capture.url + "/sessions/ep-r/calls").json()
        assert listed["calls"][0]["completion_token_ids"] == [11, 12]
        events = capture.calls("ep-r")[0].to_harness_events()
        assert [e.type for e in events] == [
            HarnessEventType.LLM_REQUEST,
            HarnessEventType.LLM_RESPONSE,
        ]
        assert events[1].data["tool_calls"][0]["name"] == "bash"


def test_admin_key_guards_the_sessions_route(standin: ModelStandIn) -> None:
    with capture_for(standin, admin_key="s3cret") as capture:
        assert httpx.get(capture.url + "/sessions/a/calls").status_code == 403
        ok = httpx.get(capture.url + "/sessions/a/calls", headers={"x-admin-key": "s3cret"})
        assert ok.status_code == 200 and ok.json()["calls"] == []


def test_unix_socket(standin: ModelStandIn, tmp_path) -> None:
    path = str(tmp_path / "capture.sock")
    with capture_for(standin, uds=path) as capture:
        capture.register_session("ep-u")
        transport = httpx.HTTPTransport(uds=path)
        with httpx.Client(transport=transport, base_url="http://capture") as client:
            reply = client.post(
                "/v1/messages",
                headers={"x-api-key": "ep-u", "anthropic-version": "2023-06-01"},
                json={
                    "model": "m",
                    "max_tokens": 9,
                    "messages": [{"role": "user", "content": "x"}],
                },
            )
        assert reply.status_code == 200 and reply.json()["content"][0]["type"] == "tool_use"
        assert len(capture.calls("ep-u")) == 1


def test_detect_by_path_header_then_body() -> None:
    assert detect("/v1/messages") is APIType.ANTHROPIC
    assert detect("/v1/chat/completions") is APIType.OPENAI_CHAT
    assert detect("/x", {"anthropic-version": "2023-06-01"}) is APIType.ANTHROPIC
    assert detect("/x", {}, {"system": "s", "messages": []}) is APIType.ANTHROPIC
    assert detect("/x", {}, {"input": "hi"}) is APIType.OPENAI_RESPONSES
    assert detect("/x", {}, {"messages": [{"role": "user", "content": "hi"}]}) is (
        APIType.OPENAI_CHAT
    )


def test_calls_from_concurrent_sessions_stay_apart() -> None:
    with ModelStandIn(
        lambda request: ScriptedReply(text=request.body["messages"][0]["content"])
    ) as standin:
        with capture_for(standin) as capture:
            ids = [f"ep-{n}" for n in range(4)]
            for session_id in ids:
                capture.register_session(session_id)

            def run(session_id: str) -> None:
                client = openai.OpenAI(
                    base_url=capture.url + "/v1", api_key=session_id, max_retries=0
                )
                for _ in range(3):
                    client.chat.completions.create(
                        model="m", messages=[{"role": "user", "content": session_id}]
                    )

            threads = [threading.Thread(target=run, args=(s,)) for s in ids]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            for session_id in ids:
                calls = capture.drain(session_id)
                assert [c.response_text for c in calls] == [session_id] * 3


def test_command_line_entry_point(standin: ModelStandIn) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "openenv.core.harness.capture",
            "--llm-url",
            standin.url,
            "--port",
            str(port),
            "--no-require-registered",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url == f"http://127.0.0.1:{port}"
        reply = httpx.post(
            url + "/v1/chat/completions",
            headers={"authorization": "Bearer any"},
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert reply.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "bash"
    finally:
        process.terminate()
        process.wait(10)
    assert process.returncode == 0
