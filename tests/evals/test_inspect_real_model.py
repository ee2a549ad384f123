"""Inspect AI evaluates the real model (SmolLM2-135M-Instruct, `real_model`) on math_env, through
Inspect's OpenAI-compatible provider as a user points it at a vLLM-style server
(``openai-api/<service>/<model>`` with a base URL and key), and writes its native log.

The log, read back with `read_eval_log`, must hold what the model really answered, the
environment's rewards as the scores (recomputed here from the questions and the model's
answers, whatever those are: a 135M model is usually wrong) and the model's token usage; with the
environment gone, the samples are errors, never scores of 0.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("inspect_ai")

from inspect_ai import eval as inspect_eval
from inspect_ai.log import EvalSample, list_eval_logs, read_eval_log
from inspect_ai.model import ChatMessageAssistant, ModelOutput, get_model

from openenv.evals.inspect import openenv_task
from openenv.testing.live_server import free_port
from tests.support.envs import missing
from tests.support.server import serve

pytestmark = pytest.mark.skipif(bool(missing("math_env")), reason=missing("math_env") or "")

_QUESTION = re.compile(r"What is (\d+) \+ (\d+)\?")


def _model(real_model: Any) -> Any:
    """What ``--model openai-api/local/<name>`` with LOCAL_BASE_URL and LOCAL_API_KEY gives."""
    return get_model(
        f"openai-api/local/{real_model.model_name}",
        base_url=real_model.url + "/v1",
        api_key="unused",  # the local server checks no key; Inspect wants one
    )


def _math_reward(answer: Any, question: str) -> float:
    """math_env's step reward for ``answer`` to ``question``: 0.2 for an integer, 0.8 more
    when it is the sum (the rubric in envs/math_env, recomputed independently)."""
    a, b = map(int, _QUESTION.fullmatch(question).groups())  # type: ignore[union-attr]
    try:
        value = int(str(answer).strip())
    except ValueError:
        return 0.0
    return 0.2 + (0.8 if value == a + b else 0.0)


def _env_steps(sample: EvalSample) -> list[tuple[float, float]]:
    """(reward the environment reported, reward recomputed) for each tool call that reached the
    environment as a step, in order, from the conversation in the log."""
    question = sample.messages[0].text
    replies: dict[str, Any] = {}
    for message in sample.messages:
        if message.role == "tool":
            replies[message.tool_call_id or ""] = message.text
    steps = []
    for message in sample.messages:
        if not isinstance(message, ChatMessageAssistant):
            continue
        for call in message.tool_calls or []:
            reply = replies[call.id]
            if reply.startswith("error:"):  # refused or unknown tool: no step, no reward
                continue
            observation = json.loads(reply)
            steps.append((observation["reward"], _math_reward(call.arguments["answer"], question)))
            question = observation.get("question") or question
    return steps


def test_inspect_evaluates_the_real_model_and_its_log_holds_outputs_rewards_and_usage(
    real_model: Any, tmp_path: Path
) -> None:
    model = _model(real_model)
    with serve("math_env.server.app:app") as env:
        task = openenv_task(
            "math", tasks=[1, 2], base_url=env.url, max_turns=2, tool_choice="required"
        )
        (log,) = inspect_eval(
            task,
            model=model,
            log_dir=str(tmp_path),
            display="none",
            max_tokens=32,
            temperature=0,
            seed=0,
        )
    assert log.status == "success", log.error

    # Inspect's native log on disk, read back as any Inspect tool would.
    (location,) = list_eval_logs(str(tmp_path))
    stored = read_eval_log(location, resolve_attachments=True)  # the requests as sent
    model_id = f"openai-api/local/{real_model.model_name}"
    assert stored.eval.model == model_id
    assert stored.samples is not None and [s.id for s in stored.samples] == ["seed-1", "seed-2"]
    first_request: dict[str, Any] = {}
    first_output: ModelOutput | None = None
    all_steps: list[tuple[float, float]] = []
    for sample in stored.samples:
        assert sample.error is None, sample.error
        assert _QUESTION.fullmatch(sample.messages[0].text), sample.messages[0].text
        # Every model turn was a call to the served model; the assistant messages are its
        # answers, as its server sent them.
        calls = [e for e in sample.events if e.event == "model"]
        assistants = [m for m in sample.messages if isinstance(m, ChatMessageAssistant)]
        assert 1 <= len(calls) == len(assistants) <= 2
        for event, message in zip(calls, assistants, strict=True):
            assert event.call is not None
            assert event.call.request["tool_choice"] == "required"
            assert event.call.request["max_tokens"] == 32
            response = event.call.response or {}
            assert response["model"] == real_model.model_name
            assert response["id"].startswith("chatcmpl-")
            assert event.output.message.text == message.text
            assert event.output.message.tool_calls == message.tool_calls
            assert message.text or message.tool_calls
        if first_output is None:
            first_request, first_output = calls[0].call.request, calls[0].output  # type: ignore[union-attr]

        # The score is the environment's: the sum (the default) of the rewards it reported for
        # the steps the model's calls made, each what math_env's rubric gives the answer.
        score = sample.scores["openenv_reward"]  # type: ignore[index]
        steps = _env_steps(sample)
        all_steps += steps
        assert score.metadata is not None
        assert score.metadata["step_rewards"] == pytest.approx([got for got, _ in steps])
        assert [got for got, _ in steps] == pytest.approx([want for _, want in steps])
        assert score.value == pytest.approx(sum(got for got, _ in steps))
        assert score.metadata["turns"] == len(assistants)

        # The model's usage, per sample: what its server counted for these calls.
        usage = sample.model_usage[model_id]
        assert usage.input_tokens == sum(e.output.usage.input_tokens for e in calls)  # type: ignore[union-attr]
        assert usage.output_tokens == sum(e.output.usage.output_tokens for e in calls)  # type: ignore[union-attr]
        assert 0 < usage.output_tokens <= 32 * len(calls)
        assert usage.input_tokens > 0
    # tool_choice "required" makes the model call the environment's tool with an answer.
    assert all_steps, "no model call was a step of the environment"
    total = stored.stats.model_usage[model_id]
    assert total.output_tokens == sum(s.model_usage[model_id].output_tokens for s in stored.samples)
    assert stored.results is not None and stored.results.completed_samples == 2
    mean = stored.results.scores[0].metrics["mean"].value
    scores = [s.scores["openenv_reward"].value for s in stored.samples]  # type: ignore[index]
    assert mean == pytest.approx(sum(scores) / 2)  # type: ignore[arg-type]

    # The recorded answer is the model's own: the same request at temperature 0 gets it again.
    assert first_output is not None
    request = {k: v for k, v in first_request.items() if k != "extra_headers"}
    replay = httpx.post(real_model.url + "/v1/chat/completions", json=request, timeout=300)
    replay.raise_for_status()
    again = replay.json()["choices"][0]["message"]
    assert (again.get("content") or "") == first_output.message.text
    again_calls = [
        (c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in again.get("tool_calls") or []
    ]
    assert again_calls == [(c.function, c.arguments) for c in first_output.message.tool_calls or []]


def test_with_the_environment_gone_the_samples_are_errors_not_zeros(
    real_model: Any, tmp_path: Path
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    task = openenv_task("math", tasks=[1], base_url=dead, tool_choice="required")
    (log,) = inspect_eval(
        task, model=_model(real_model), log_dir=str(tmp_path), display="none", max_tokens=32
    )
    assert log.status == "success"  # fail_on_error=False: the eval ends, the sample failed
    stored = read_eval_log(list_eval_logs(str(tmp_path))[0])
    (sample,) = stored.samples or []
    assert sample.error is not None
    assert not sample.scores  # no reward, rather than a reward of 0
    assert stored.results is None or not stored.results.scores
