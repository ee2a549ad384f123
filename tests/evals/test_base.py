"""The evaluation contract: task specs, failure classification and the aggregate."""

from __future__ import annotations

import json

import pytest

from openenv.core.errors import ConnectionLostError, InvalidActionError
from openenv.core.llm_client import LLMStatusError, LLMUnavailableError
from openenv.evals import (
    EvalHarness,
    EvalTask,
    TaskResult,
    classify_failure,
    episode_reward,
    known_tasks,
    normalize_tasks,
)
from openenv.sandbox import SandboxError
from tests.support.envs import missing


def test_task_specs() -> None:
    tasks = normalize_tasks(["count-error-lines", 7, {"seed": 3, "size": 10}, EvalTask("x")])
    assert [t.id for t in tasks] == ["count-error-lines", "seed-7", "3", "x"]
    assert tasks[0].reset_kwargs == {"task_id": "count-error-lines"}
    assert tasks[1].reset_kwargs == {"seed": 7}
    assert tasks[2].reset_kwargs == {"seed": 3, "size": 10}
    # The same task twice keeps both runs apart.
    assert [t.id for t in normalize_tasks([1, 1])] == ["seed-1", "seed-1#2"]
    with pytest.raises(TypeError):
        normalize_tasks([True])


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (ConnectionLostError("gone"), "infrastructure_error"),
        (SandboxError("bwrap failed"), "infrastructure_error"),
        (LLMUnavailableError("model down", attempts=4), "infrastructure_error"),
        (OSError("refused"), "infrastructure_error"),
        (LLMStatusError("bad request", url="u", status_code=400, body=""), "error"),
        (InvalidActionError("bad action"), "error"),
        (ValueError("bug"), "error"),
    ],
)
def test_failure_classification(exc: BaseException, status: str) -> None:
    assert classify_failure(exc) == status


class _Scripted(EvalHarness):
    """An EvalHarness whose episodes are decided by the task's metadata."""

    async def run_task(self, task: EvalTask) -> TaskResult:
        outcome = task.metadata["outcome"]
        if isinstance(outcome, BaseException):
            raise outcome
        return TaskResult(task.id, "scored", reward=outcome, success=outcome >= 1.0)


def test_failures_are_counted_apart_and_never_averaged_as_zero() -> None:
    tasks = [
        EvalTask("a", metadata={"outcome": 1.0}),
        EvalTask("b", metadata={"outcome": 0.5}),
        EvalTask("c", metadata={"outcome": ConnectionLostError("server died")}),
        EvalTask("d", metadata={"outcome": RuntimeError("environment bug")}),
    ]
    report = _Scripted().evaluate(tasks, max_concurrency=2)
    assert [r.status for r in report.results] == [
        "scored",
        "scored",
        "infrastructure_error",
        "error",
    ]
    assert report.mean_reward == pytest.approx(0.75)
    assert report.success_rate == pytest.approx(0.5)
    failed = report.results[2]
    assert failed.reward is None and failed.success is None
    assert "ConnectionLostError: server died" == failed.error
    data = json.loads(report.to_json())
    assert data["harness"] == "_Scripted"
    assert data["aggregate"] == {
        "tasks": 4,
        "scored": 2,
        "mean_reward": 0.75,
        "success_rate": 0.5,
        "infrastructure_failures": 1,
        "errors": 1,
    }


def test_no_task_set_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="tasks="):
        _Scripted().evaluate()


def test_episode_reward_modes() -> None:
    assert episode_reward([0.0, 0.0, 1.0], "sum") == 1.0
    assert episode_reward([1.0, 0.2], "last") == 0.2
    assert episode_reward([1.0, 0.2], "mean") == pytest.approx(0.6)
    assert episode_reward([], "mean") == 0.0


def test_known_task_sets() -> None:
    assert known_tasks("math") is None  # drawn from a seed: pass seeds
    if missing("terminal_env"):
        pytest.skip(missing("terminal_env") or "")
    tasks = known_tasks("terminal_env")
    assert tasks is not None
    by_id = {t.id: t for t in tasks}
    assert by_id["create-greeting"].reset_kwargs == {"task_id": "create-greeting"}
    assert by_id["create-greeting"].metadata["category"] == "files"


def test_openenv_eval_interface() -> None:
    # OpenEnv's openenv.core.evals: strict records, run_from_config keeps the config.
    from pydantic import ValidationError

    from openenv.core.evals import EvalConfig, EvalResult
    from openenv.core.evals import EvalHarness as OpenEnvEvalHarness

    config = EvalConfig(
        harness_name="_Scripted",
        harness_version="1",
        library_versions={"openenv": "0.11"},
        dataset="scripted",
        eval_parameters={"tasks": [EvalTask("a", metadata={"outcome": 1.0})]},
    )
    with pytest.raises(ValidationError):
        EvalConfig(**config.model_dump(), extra_field=1)
    harness = _Scripted()
    assert isinstance(harness, OpenEnvEvalHarness)
    result = harness.run_from_config(config)
    assert isinstance(result, EvalResult) and result.config == config
    assert result.scores["mean_reward"] == 1.0 and result.scores["infrastructure_failures"] == 0

    class OnlyRun(OpenEnvEvalHarness):  # written for OpenEnv: implements run alone
        def run(self, harness_version, library_versions, dataset, eval_parameters):
            return {"accuracy": 0.5, "dataset": dataset}

    assert OnlyRun().name == "OnlyRun"
    assert OnlyRun().run_from_config(config).scores == {"accuracy": 0.5, "dataset": "scripted"}


def test_importing_the_package_is_light() -> None:
    import subprocess
    import sys

    code = (
        "import sys, openenv.evals, openenv.core.evals; "
        "print(sorted(m for m in ('inspect_ai', 'openenv.evals.env_harness') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
