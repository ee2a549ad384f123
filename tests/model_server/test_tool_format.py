"""The Hermes tool-call format the model server speaks for a template without tools: what a
small model writes (whole, cut off, malformed) and what the caller gets back."""

from __future__ import annotations

import pytest

from openenv.models.tool_format import (
    call_is_complete,
    messages_for_template,
    parse_answer,
    safe_prefix_length,
    tools_system_text,
)

ACT = {
    "type": "function",
    "function": {
        "name": "act",
        "description": "Answer.",
        "parameters": {"type": "object", "properties": {"answer": {"type": "string"}}},
    },
}


def test_calls_are_read_with_the_text_before_them() -> None:
    parsed = parse_answer(
        'Let me answer.\n<tool_call>\n{"name": "act", "arguments": {"answer": "4"}}\n</tool_call>'
        '<tool_call>{"name": "act", "arguments": "{\\"answer\\": \\"5\\"}"}</tool_call>'
    )
    assert parsed.content == "Let me answer."
    assert [(c["name"], c["arguments"]) for c in parsed.tool_calls] == [
        ("act", {"answer": "4"}),
        ("act", {"answer": "5"}),
    ]
    assert len({c["id"] for c in parsed.tool_calls}) == 2


@pytest.mark.parametrize(
    "tail",
    ["", "\n</tool_", "\n}\n\nThe answer is", "</tool_call>\nMore words."],
    ids=["no-close", "cut-close", "rambling", "text-after"],
)
def test_a_whole_call_is_read_whatever_follows_it(tail: str) -> None:
    parsed = parse_answer('<tool_call>\n{"name": "act", "arguments": {"answer": "4"}}' + tail)
    assert [c["arguments"] for c in parsed.tool_calls] == [{"answer": "4"}]
    assert parsed.content is None


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>\n{"name": "act", "arguments": {"answer": "4"',  # cut off mid-call
        '<tool_call>{"name": 17, "arguments": {}}</tool_call>',  # no name
        '<tool_call>{"name": "act", "arguments": 17}</tool_call>',  # a bare value
        '<tool_call>{"name": "act", "arguments": "not json"}</tool_call>',
        '<tool_call>{"name": "act"}</tool_call><tool_call>[1, 2]</tool_call>',  # one bad of two
        "<tool_call>",
    ],
)
def test_a_malformed_call_leaves_the_whole_answer_as_text(text: str) -> None:
    parsed = parse_answer(text)
    assert parsed.tool_calls == [] and parsed.content == text


def test_a_call_is_complete_when_its_json_closes() -> None:
    assert not call_is_complete('<tool_call>\n{"name": "act", "arguments": {')
    assert not call_is_complete("no call at all")
    assert call_is_complete('<tool_call>\n{"name": "act", "arguments": {"answer": "4"}}')


def test_streaming_holds_back_what_may_start_a_call() -> None:
    assert safe_prefix_length("Hello <tool") == len("Hello")
    assert safe_prefix_length("Hello <tool_call>{") == len("Hello")
    assert safe_prefix_length("Hello <b>") == len("Hello <b>")
    assert safe_prefix_length("Hello   ") == len("Hello")


def test_tools_calls_and_results_become_template_text() -> None:
    messages = messages_for_template(
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "What is 2 + 2?"}]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "function": {"name": "act", "arguments": '{"answer": "4"}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "correct"},
        ],
        [ACT],
    )
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert (
        messages[0]["content"].startswith("Be brief.\n\n")
        and '"name": "act"' in messages[0]["content"]
    )
    assert messages[1]["content"] == "What is 2 + 2?"
    assert parse_answer(messages[2]["content"]).tool_calls[0]["arguments"] == {"answer": "4"}
    assert messages[3]["content"] == "<tool_response>\ncorrect\n</tool_response>"
    # The example call names the first tool with its arguments, as a small model copies it.
    assert '{"name": "act", "arguments": {"answer": "..."}}' in tools_system_text([ACT])
