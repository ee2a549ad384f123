"""EnvEvalHarness against real environment servers; the model is the scripted stand-in
(`openenv.testing.model_standin`), standing in for a paid model API."""

from __future__ import annotations

import json

import pytest

from openenv.core.llm_client import AnthropicClient, OpenAIClient
from openenv.evals import EnvEvalHarness, EvalTask
from openenv.testing.model_standin import ModelStandIn, ScriptedReply
from tests.support.envs import missing
from tests.support.server import free_port, serve

from .scripts import math_answerer, math_reward

pytestmark = pytest.mark.skipif(bool(missing("math_env")), reason=missing("math_env") or "")


@pytest.fixture(scope="module")
def math_server():
    with serve("math_env.server.app:app") as server:
        yield server


def test_math_tasks_scored_with_the_environments_reward(math_server) -> None:
    answers = (True, False, True)
    with ModelStandIn(math_answerer(answers)) as standin:
        harness = EnvEvalHarness(
            "math",
            base_url=math_server.url,
            model=OpenAIClient(base_url=standin.url, model="standin", max_retries=0),
            tasks=[1, 2, 3],
            reward_mode="mean",
            success_threshold=0.9,
            max_concurrency=2,
        )
        report = harness.evaluate()
        first_request = standin.requests[0].body

    expected = math_reward(answers)
    assert [r.task_id for r in report.results] == ["seed-1", "seed-2", "seed-3"]
    for result in report.results:
        assert result.status == "scored"
        assert result.done and result.turns == 3
        assert result.step_rewards == pytest.approx([1.0, 0.2, 1.0])
        assert result.reward == pytest.approx(expected)
        assert result.success is False
        assert result.metadata["stop_reason"] == "done"
    assert report.mean_reward == pytest.approx(expected)
    assert report.success_rate == 0.0
    assert report.infrastructure_failures == 0
    # Without MCP tools the model gets one tool whose arguments are the action.
    (tool,) = first_request["tools"]
    assert tool["function"]["name"] == "act"
    assert set(tool["function"]["parameters"]["properties"]) == {"answer"}
    # The whole report is plain JSON.
    data = json.loads(report.to_json())
    assert data["aggregate"]["scored"] == 3
    assert data["results"][0]["transcript"][0] == {"role": "user", "content": "What is 17 + 72?"}


def test_anthropic_dialect_and_a_model_that_stops_early(math_server) -> None:
    # Right once, then a reply without a tool call: the episode ends, scored as it stands.
    replies = [
        ScriptedReply(tool_calls=[{"name": "act", "arguments": {"answer": "89"}}]),
        ScriptedReply(text="I give up."),
    ]
    with ModelStandIn(replies) as standin:
        harness = EnvEvalHarness(
            base_url=math_server.url,
            model=AnthropicClient(base_url=standin.url, model="standin", max_retries=0),
            tasks=[EvalTask("first", {"seed": 1})],
        )
        report = harness.evaluate()
        assert standin.requests[0].dialect == "anthropic"
    (result,) = report.results
    assert result.status == "scored"
    assert result.reward == pytest.approx(1.0)
    assert result.done is False and result.turns == 2
    assert result.metadata["stop_reason"] == "no_tool_call"


def test_refused_action_goes_back_to_the_model(math_server) -> None:
    # An unknown tool and a malformed action are the model's mistakes: it is told, and goes on.
    replies = [
        ScriptedReply(tool_calls=[{"name": "nope", "arguments": {}}]),
        ScriptedReply(tool_calls=[{"name": "act", "arguments": {"wrong": 1}}]),
        ScriptedReply(tool_calls=[{"name": "act", "arguments": {"answer": "89"}}]),
    ]
    with ModelStandIn(replies) as standin:
        harness = EnvEvalHarness(
            base_url=math_server.url,
            model=OpenAIClient(base_url=standin.url, model="standin", max_retries=0),
            tasks=[1],
            max_turns=3,
        )
        report = harness.evaluate()
    (result,) = report.results
    assert result.status == "scored", result.error
    assert result.turns == 3 and result.metadata["stop_reason"] == "max_turns"
    tool_replies = [m["content"] for m in result.transcript or [] if m["role"] == "tool"]
    assert tool_replies[0].startswith("error: unknown tool 'nope'")
    assert tool_replies[1].startswith("error:") and "answer" in tool_replies[1]
    assert result.step_rewards == pytest.approx([1.0])


def test_unreachable_environment_is_an_infrastructure_failure_not_a_zero() -> None:
    with ModelStandIn([]) as standin:
        harness = EnvEvalHarness(
            base_url=f"http://127.0.0.1:{free_port()}",
            model=OpenAIClient(base_url=standin.url, model="standin", max_retries=0),
            tasks=[1, 2],
            client_kwargs={"connect_timeout_s": 5},
        )
        report = harness.evaluate()
        assert standin.requests == []
    assert [r.status for r in report.results] == ["infrastructure_error"] * 2
    assert all(r.reward is None and r.success is None and r.error for r in report.results)
    assert report.mean_reward is None and report.success_rate is None
    assert report.aggregate()["infrastructure_failures"] == 2


def test_environment_killed_mid_episode_is_an_infrastructure_failure() -> None:
    with serve("math_env.server.app:app", in_process=False) as server:
        process = server.process
        assert process is not None
        answer = math_answerer()

        def kill_then_answer(request):
            if len(request.body["messages"]) > 1:  # the second turn: the server dies first
                process.kill()
                process.wait()
            return answer(request)

        with ModelStandIn(kill_then_answer) as standin:
            harness = EnvEvalHarness(
                base_url=server.url,
                model=OpenAIClient(base_url=standin.url, model="standin", max_retries=0),
                tasks=[1],
                client_kwargs={"max_reconnect_attempts": 0},
            )
            report = harness.evaluate()
    (result,) = report.results
    assert result.status == "infrastructure_error", result
    assert result.reward is None
    assert report.mean_reward is None and report.infrastructure_failures == 1


@pytest.mark.skipif(bool(missing("terminal_env")), reason=missing("terminal_env") or "")
def test_mcp_environment_tools_drive_a_terminal_task() -> None:
    # The model gets terminal_env's MCP tools (bash, submit); the verifier's verdict is the reward.
    calls = [
        ("bash", {"command": "ls"}),
        ("bash", {"command": "echo 'Hello, world!' > hello.txt"}),
        ("submit", {}),
    ]
    script = [ScriptedReply(tool_calls=[{"name": n, "arguments": a}]) for n, a in calls]
    with serve("terminal_env.server.mcp_app:app") as server, ModelStandIn(script) as standin:
        harness = EnvEvalHarness(
            "terminal",
            base_url=server.url,
            model=OpenAIClient(base_url=standin.url, model="standin", max_retries=0),
            tasks=["create-greeting"],
        )
        report = harness.evaluate()
        tools = {t["function"]["name"] for t in standin.requests[0].body["tools"]}
    assert {"bash", "submit"} <= tools
    (result,) = report.results
    assert result.status == "scored", result.error
    assert result.reward == 1.0 and result.success and result.done
    assert result.transcript is not None
    assert "Hello, world!" in result.transcript[0]["content"]  # the task's instruction
    assert result.step_rewards == [0.0, 0.0, 1.0]  # the verdict comes with the submit step


@pytest.mark.slow
def test_environment_by_name_is_started_and_stopped() -> None:
    # No base_url: AutoEnv starts the installed math_env for the evaluation and stops it after.
    with ModelStandIn(math_answerer()) as standin:
        harness = EnvEvalHarness(
            "math",
            model=OpenAIClient(base_url=standin.url, model="standin", max_retries=0),
            tasks=[1, 2],
        )
        report = harness.evaluate()
    assert [r.status for r in report.results] == ["scored", "scored"]
    assert report.mean_reward == pytest.approx(3.0)  # three right answers, summed
    assert harness.base_url is None
