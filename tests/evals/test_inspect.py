"""The Inspect AI integration end to end: a real environment server, Inspect's OpenAI-compatible
provider (``openai-api/<service>/<model>``) pointed at the model stand-in
(`openenv.testing.model_standin`, which stands in for a paid model API), logs read back."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("inspect_ai")

from inspect_ai import eval as inspect_eval
from inspect_ai.log import list_eval_logs, read_eval_log
from inspect_ai.model import get_model

from openenv.evals.inspect import openenv_task
from openenv.testing.model_standin import ModelStandIn, ScriptedReply
from tests.support.envs import missing
from tests.support.server import REPO, serve

from .scripts import math_answerer, math_reward

# Inspect's import and first eval in a process take several seconds on their own: slow.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(missing("math_env")), reason=missing("math_env") or ""),
]


def standin_model(standin: ModelStandIn):
    return get_model("openai-api/standin/scripted", base_url=standin.url + "/v1", api_key="unused")


def test_inspect_eval_writes_a_log_whose_scores_are_the_environments_rewards(
    tmp_path: Path,
) -> None:
    answers = (True, False, True)
    with serve("math_env.server.app:app") as server, ModelStandIn(math_answerer(answers)) as s:
        task = openenv_task("math", tasks=[1, 2], base_url=server.url, reward_mode="mean")
        (log,) = inspect_eval(task, model=standin_model(s), log_dir=str(tmp_path), display="none")
        tools = s.requests[0].body["tools"]

    assert log.status == "success"
    (location,) = list_eval_logs(str(tmp_path))
    stored = read_eval_log(location)
    expected = math_reward(answers)
    assert stored.samples is not None and [x.id for x in stored.samples] == ["seed-1", "seed-2"]
    for sample in stored.samples:
        assert sample.error is None
        score = sample.scores["openenv_reward"]
        assert score.value == pytest.approx(expected)
        assert score.metadata["step_rewards"] == pytest.approx([1.0, 0.2, 1.0])
        assert score.metadata["done"] is True
        # The conversation is the episode's: the environment's question, then tool results.
        assert sample.messages[0].text.startswith("What is ")
        assert [m.role for m in sample.messages].count("tool") == 3
    assert stored.results is not None
    metrics = stored.results.scores[0].metrics
    assert metrics["mean"].value == pytest.approx(expected)
    assert metrics["success_rate"].value == 0.0
    assert tools[0]["function"]["name"] == "act"


def test_environment_killed_mid_episode_is_a_sample_error_not_a_zero(tmp_path: Path) -> None:
    with serve("math_env.server.app:app", in_process=False) as server:
        process = server.process
        assert process is not None
        answer = math_answerer()

        def kill_then_answer(request):
            if len(request.body["messages"]) > 1:
                process.kill()
                process.wait()
            return answer(request)

        with ModelStandIn(kill_then_answer) as standin:
            task = openenv_task("math", tasks=[1], base_url=server.url)
            (log,) = inspect_eval(
                task, model=standin_model(standin), log_dir=str(tmp_path), display="none"
            )

    # fail_on_error=False: the eval completes, with the failed sample recorded as an error.
    assert log.status == "success"
    stored = read_eval_log(list_eval_logs(str(tmp_path))[0])
    (sample,) = stored.samples or []
    assert sample.error is not None
    assert "Connection" in sample.error.message or "connection" in sample.error.message
    assert not sample.scores  # no reward, rather than a reward of 0


def test_inspect_cli_runs_the_registered_task(tmp_path: Path) -> None:
    # math_env with seed 1 asks 17 + 72, 97 + 8 and 32 + 15.
    script = [
        ScriptedReply(tool_calls=[{"name": "act", "arguments": {"answer": answer}}])
        for answer in ("89", "105", "47")
    ]
    with serve("math_env.server.app:app") as server, ModelStandIn(script) as standin:
        env = {
            **os.environ,
            "STANDIN_BASE_URL": standin.url + "/v1",
            "STANDIN_API_KEY": "unused",
        }
        command = [
            sys.executable, "-m", "inspect_ai", "eval", "openenv/openenv_task",
            "-T", "env=math", "-T", "tasks=1", "-T", f"base_url={server.url}",
            "--model", "openai-api/standin/scripted",
            "--log-dir", str(tmp_path), "--display", "none",
        ]  # fmt: skip
        done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
    stored = read_eval_log(list_eval_logs(str(tmp_path))[0])
    assert stored.status == "success"
    (sample,) = stored.samples or []
    assert sample.scores["openenv_reward"].value == pytest.approx(3.0)  # the sum, by default


def test_openenv_inspect_ai_harness_runs_the_registered_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from openenv.core.evals import EvalConfig, InspectAIHarness

    monkeypatch.setenv("STANDIN_API_KEY", "unused")
    with serve("math_env.server.app:app") as server, ModelStandIn(math_answerer()) as standin:
        config = EvalConfig(
            harness_name="inspect_ai",
            harness_version="0.3",
            library_versions={},
            dataset="openenv/openenv_task",
            eval_parameters={
                "model": "openai-api/standin/scripted",
                "model_base_url": standin.url + "/v1",
                "task_args": {"env": "math", "tasks": [1, 2], "base_url": server.url},
            },
        )
        result = InspectAIHarness(log_dir=str(tmp_path)).run_from_config(config)
    assert result.scores["mean"] == pytest.approx(3.0)
    assert result.scores["success_rate"] == 1.0
    assert list_eval_logs(str(tmp_path))
