"""Scripted model replies for the eval tests.

`ModelStandIn` (openenv.testing.model_standin) stands in for a paid model API here: real HTTP in
the OpenAI / Anthropic wire formats, replies computed from what the client sent.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence

from openenv.testing.model_standin import ScriptedReply, StandInRequest

_QUESTION = re.compile(r"What is (\d+) \+ (\d+)\?")


def math_answerer(correct: Sequence[bool] = (True,)) -> Callable[[StandInRequest], ScriptedReply]:
    """Answers math_env's latest question through the ``act`` tool: right or off by one, by
    turn (the last entry repeats), so the expected reward is known in advance."""

    def reply(request: StandInRequest) -> ScriptedReply:
        body = request.body
        turns = sum(1 for m in body["messages"] if m["role"] == "assistant")
        a, b = map(int, _QUESTION.findall(json.dumps(body["messages"][-1]))[-1])
        right = correct[min(turns, len(correct) - 1)]
        answer = a + b if right else a + b + 1
        return ScriptedReply(tool_calls=[{"name": "act", "arguments": {"answer": str(answer)}}])

    return reply


def math_reward(correct: Sequence[bool]) -> float:
    """math_env's step reward: 0.2 for an integer answer plus 0.8 when it is right."""
    return sum(1.0 if right else 0.2 for right in correct) / len(correct)
