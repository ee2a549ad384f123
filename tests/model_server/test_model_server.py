"""The real model server (SmolLM2-135M-Instruct through transformers) over real HTTP, spoken to
with the OpenAI SDK and raw requests as a vLLM endpoint would be: token ids that decode to the
text, per-token logprobs that are the model's own, seeds, streaming, tool calls, bad input."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from openenv.core.harness.capture import CaptureServer

ADD_TOOL = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}
QUESTION = [{"role": "user", "content": "What is 7 + 5?"}]


@pytest.fixture(scope="module")
def client(real_model: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=real_model.url + "/v1", api_key="unused", max_retries=0)


def _chat(client: openai.OpenAI, **kwargs: Any) -> dict[str, Any]:
    kwargs.setdefault("model", "any-name")
    kwargs.setdefault("messages", QUESTION)
    kwargs.setdefault("max_tokens", 16)
    reply = client.chat.completions.create(**kwargs)
    return reply.model_dump()


def test_token_ids_decode_to_the_text_and_logprobs_are_the_models(
    real_model: Any, client: openai.OpenAI
) -> None:
    import torch

    reply = _chat(client, temperature=0, logprobs=True, extra_body={"return_token_ids": True})
    choice = reply["choices"][0]
    ids = choice["token_ids"]
    entries = choice["logprobs"]["content"]
    assert reply["model"] == real_model.model_name
    assert len(ids) == len(entries) == reply["usage"]["completion_tokens"] > 0
    tokenizer = real_model.engine.tokenizer
    assert tokenizer.decode(ids, skip_special_tokens=True) == choice["message"]["content"]
    assert "12" in choice["message"]["content"] or choice["finish_reason"] == "length"
    # The prompt is the chat template's rendering of the messages.
    expected_prompt = tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True)
    if not isinstance(expected_prompt, list):
        expected_prompt = list(expected_prompt["input_ids"])
    assert reply["prompt_token_ids"] == expected_prompt
    # Each logprob is what one full forward pass over prompt + answer gives that token.
    sequence = torch.tensor([reply["prompt_token_ids"] + ids])
    with torch.no_grad():
        reference = torch.log_softmax(real_model.engine.model(sequence).logits[0].float(), -1)
    start = len(reply["prompt_token_ids"]) - 1
    for offset, (token, entry) in enumerate(zip(ids, entries, strict=True)):
        assert entry["logprob"] == pytest.approx(reference[start + offset, token].item(), abs=1e-3)
        assert entry["token"] == tokenizer.decode([token])
    # Greedy: every token was the most likely one.
    assert all(
        reference[start + offset].argmax().item() == token for offset, token in enumerate(ids)
    )


def test_a_seed_gives_the_same_sample_and_fields_appear_only_when_asked(
    client: openai.OpenAI,
) -> None:
    one = _chat(client, temperature=1.0, seed=11, extra_body={"return_token_ids": True})
    two = _chat(client, temperature=1.0, seed=11, extra_body={"return_token_ids": True})
    assert one["choices"][0]["token_ids"] == two["choices"][0]["token_ids"]
    plain = _chat(client, temperature=1.0, seed=11)
    assert plain["choices"][0]["message"]["content"] == one["choices"][0]["message"]["content"]
    assert plain["choices"][0]["logprobs"] is None
    assert "token_ids" not in plain["choices"][0] and "prompt_token_ids" not in plain


def test_n_choices_top_logprobs_and_max_tokens(client: openai.OpenAI) -> None:
    reply = _chat(
        client,
        n=2,
        seed=5,
        max_tokens=6,
        logprobs=True,
        top_logprobs=3,
        extra_body={"return_token_ids": True},
    )
    assert [c["index"] for c in reply["choices"]] == [0, 1]
    for choice in reply["choices"]:
        entries = choice["logprobs"]["content"]
        assert len(choice["token_ids"]) <= 6
        if choice["finish_reason"] == "length":
            assert len(choice["token_ids"]) == 6
        for entry in entries:
            alternatives = entry["top_logprobs"]
            assert len(alternatives) == 3
            assert alternatives[0]["logprob"] >= entry["logprob"] - 1e-6
    assert reply["usage"]["completion_tokens"] == sum(len(c["token_ids"]) for c in reply["choices"])


def test_stop_strings_end_the_answer_before_them(client: openai.OpenAI) -> None:
    whole = _chat(client, temperature=0, max_tokens=24)["choices"][0]["message"]["content"]
    words = whole.split()
    assert len(words) > 3, whole
    stop = " " + words[2]
    cut = _chat(client, temperature=0, max_tokens=24, stop=[stop])["choices"][0]
    assert cut["finish_reason"] == "stop"
    assert cut["message"]["content"] == whole[: whole.index(stop)]


def test_streaming_gives_the_same_tokens_as_a_whole_reply(client: openai.OpenAI) -> None:
    kwargs: dict[str, Any] = {
        "model": "m",
        "messages": QUESTION,
        "max_tokens": 16,
        "seed": 3,
        "logprobs": True,
        "extra_body": {"return_token_ids": True},
    }
    whole = client.chat.completions.create(**kwargs).model_dump()["choices"][0]
    text, ids, logprobs, finish, usage = "", [], [], None, None
    prompt_ids = None
    for chunk in client.chat.completions.create(
        stream=True, stream_options={"include_usage": True}, **kwargs
    ):
        data = chunk.model_dump()
        prompt_ids = data.get("prompt_token_ids", prompt_ids)
        if data.get("usage"):
            usage = data["usage"]
        for choice in data["choices"]:
            text += choice["delta"].get("content") or ""
            ids += choice.get("token_ids") or []
            logprobs += [e["logprob"] for e in (choice.get("logprobs") or {}).get("content") or []]
            finish = choice["finish_reason"] or finish
    assert text == whole["message"]["content"]
    assert ids == whole["token_ids"]
    assert logprobs == [e["logprob"] for e in whole["logprobs"]["content"]]
    assert finish == whole["finish_reason"]
    assert prompt_ids and usage and usage["completion_tokens"] == len(ids)


def test_required_tool_choice_makes_a_tool_call_whole_and_streamed(
    client: openai.OpenAI,
) -> None:
    messages = [{"role": "user", "content": "Add 7 and 5 with the tool."}]
    kwargs: dict[str, Any] = {
        "model": "m",
        "messages": messages,
        "tools": [ADD_TOOL],
        "tool_choice": "required",
        "temperature": 0,
        "max_tokens": 40,
    }
    reply = client.chat.completions.create(**kwargs)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert choice.message.tool_calls and choice.message.tool_calls[0].function.name == "add"
    arguments = json.loads(choice.message.tool_calls[0].function.arguments)
    assert isinstance(arguments, dict)
    streamed: dict[int, dict[str, str]] = {}
    content = ""
    for chunk in client.chat.completions.create(stream=True, **kwargs):
        for delta_choice in chunk.choices:
            content += delta_choice.delta.content or ""
            for call in delta_choice.delta.tool_calls or []:
                entry = streamed.setdefault(call.index, {"name": "", "arguments": ""})
                entry["name"] += call.function.name or ""
                entry["arguments"] += call.function.arguments or ""
    assert content == ""
    assert streamed[0]["name"] == "add"
    assert json.loads(streamed[0]["arguments"]) == arguments
    # The answer continues a conversation with the call and its result in it.
    follow = client.chat.completions.create(
        model="m",
        messages=[
            *messages,
            choice.message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": choice.message.tool_calls[0].id, "content": "12"},
        ],
        tools=[ADD_TOOL],
        tool_choice="none",
        temperature=0,
        max_tokens=16,
    )
    assert follow.choices[0].message.tool_calls is None
    assert follow.choices[0].message.content


def test_bad_requests_get_typed_errors_and_the_server_keeps_serving(
    real_model: Any, client: openai.OpenAI
) -> None:
    url = real_model.url + "/v1/chat/completions"
    cases = [
        (b"not json", "JSON"),
        (json.dumps({"messages": []}).encode(), "messages"),
        (json.dumps({"messages": [{"content": "hi"}]}).encode(), "role"),
        (json.dumps({"messages": QUESTION, "temperature": -1}).encode(), "temperature"),
        (json.dumps({"messages": QUESTION, "n": 2, "stream": True}).encode(), "stream"),
        (
            json.dumps({"messages": [{"role": "user", "content": "word " * 9000}]}).encode(),
            "context length",
        ),
    ]
    for body, needle in cases:
        response = httpx.post(url, content=body, headers={"content-type": "application/json"})
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error"
        assert needle in error["message"]
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="m", messages=[], max_tokens=4)
    assert _chat(client, max_tokens=2)["choices"][0]["message"]["content"] is not None


def test_tokenize_detokenize_and_models(real_model: Any) -> None:
    models = httpx.get(real_model.url + "/v1/models").json()
    assert models["data"][0]["id"] == real_model.model_name
    tokens = httpx.post(real_model.url + "/tokenize", json={"prompt": "seven plus five"}).json()
    back = httpx.post(real_model.url + "/detokenize", json={"tokens": tokens["tokens"]}).json()
    assert back["prompt"] == "seven plus five"
    rendered = httpx.post(real_model.url + "/tokenize", json={"messages": QUESTION}).json()
    assert rendered["count"] == len(rendered["tokens"]) > tokens["count"]
    bad = httpx.post(real_model.url + "/detokenize", json={"tokens": [-1]})
    assert bad.status_code == 400


def test_the_capture_proxy_records_token_ids_and_logprobs_as_from_vllm(real_model: Any) -> None:
    with CaptureServer(llm_url=real_model.url) as capture:
        capture.register_session("s1")
        proxied = openai.OpenAI(base_url=capture.url + "/v1", api_key="s1", max_retries=0)
        reply = proxied.chat.completions.create(model="m", messages=QUESTION, max_tokens=12, seed=1)
        calls = capture.calls("s1")
    assert len(calls) == 1
    call = calls[0].to_dict()
    ids = call["completion_token_ids"]
    assert ids and len(call["logprobs"]) == len(ids)
    text = real_model.engine.tokenizer.decode(ids, skip_special_tokens=True)
    assert text == call["response_text"] == reply.choices[0].message.content
    assert call["prompt_token_ids"]


def test_metrics_count_answered_and_refused_requests(
    real_model: Any, client: openai.OpenAI
) -> None:
    from openenv.models.server import request_counts

    before = request_counts(real_model.url)
    _chat(client, max_tokens=2)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="m", messages=[], max_tokens=2)
    after = request_counts(real_model.url)
    assert after.get("answered", 0) == before.get("answered", 0) + 1
    assert after.get("refused", 0) == before.get("refused", 0) + 1
    assert real_model.requests_answered() == after["answered"]


def test_logit_bias_steers_the_answer_and_bad_ids_are_refused(
    real_model: Any, client: openai.OpenAI
) -> None:
    tokenizer = real_model.engine.tokenizer
    (banana,) = tokenizer.encode("Banana", add_special_tokens=False)[:1]
    reply = _chat(
        client,
        temperature=0,
        max_tokens=1,
        logit_bias={str(banana): 100},
        extra_body={"return_token_ids": True},
    )
    assert reply["choices"][0]["token_ids"] == [banana]
    with pytest.raises(openai.BadRequestError, match="logit_bias"):
        _chat(client, max_tokens=1, logit_bias={"99999999": 5})


def test_an_oversized_body_is_refused_before_it_is_read(real_model: Any) -> None:
    response = httpx.post(
        real_model.url + "/v1/chat/completions",
        content=b"x" * (17 * 1024 * 1024),
        headers={"content-type": "application/json"},
        timeout=60,
    )
    assert response.status_code == 413
    assert "request body over" in response.json()["error"]["message"]
