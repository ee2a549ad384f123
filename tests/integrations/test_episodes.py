"""The layer the trainer adapters share: text -> tool call, and who is at fault when a step
fails (the model: an invalid step it can recover from; the infrastructure: an error)."""

from __future__ import annotations

import pytest

from openenv.core.env_server.mcp_types import Tool
from openenv.integrations._episodes import (
    EnvironmentInfrastructureError,
    ServedEnv,
    parse_text_action,
)

from .conftest import solve

ACT = Tool(
    name="act",
    description="",
    input_schema={"type": "object", "properties": {"answer": {"type": "string"}}},
)
ECHO = Tool(name="echo_message", description="", input_schema={"type": "object"})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('<tool_call>{"name": "act", "arguments": {"answer": "4"}}</tool_call>', {"answer": "4"}),
        ('Sure.\n```json\n{"answer": "4"}\n```', {"answer": "4"}),
        ('{"name": "act", "arguments": "{\\"answer\\": \\"4\\"}"}', {"answer": "4"}),
        ("  4 ", {"answer": "4"}),
    ],
)
def test_text_becomes_the_act_tool(text: str, expected: dict) -> None:
    assert parse_text_action(text, [ACT], mcp=False) == ("act", expected)


def test_mcp_needs_a_tool_call() -> None:
    call = '<tool_call>{"name": "echo_message", "arguments": {"message": "x"}}</tool_call>'
    assert parse_text_action(call, [ECHO], mcp=True) == ("echo_message", {"message": "x"})
    with pytest.raises(ValueError, match="echo_message"):
        parse_text_action("just words", [ECHO], mcp=True)


def test_a_refused_action_is_the_models_fault_and_the_episode_goes_on(math_url: str) -> None:
    with ServedEnv(math_url, invalid_action_reward=-1.0) as served:
        episode = served.episode(seed=21)
        try:
            refused = episode.step_text('{"not_a_field": 1}')
            assert refused.metadata["invalid_action"] is True
            assert refused.reward == -1.0 and not refused.done
            right = episode.step_text(solve(episode.initial_text()))
            assert right.reward == 1.0
        finally:
            episode.close()


def test_an_unreachable_environment_is_an_infrastructure_error(dead_url: str) -> None:
    with pytest.raises(EnvironmentInfrastructureError) as caught:
        ServedEnv(dead_url).episode()
    assert caught.value.category == "infrastructure"
