"""Collecting episodes into a dataset, on real servers: the scripted policy on several
environments (every installed one in the slow suite), concurrency, resume, filters, failures
recorded (never dropped, never scored 0), the `datasets` export, the Hub push's dry run, an
OpenAI-dialect policy through the model stand-in (standing in for a paid model API) with every
step's reward and every call's tokens kept, and `openenv collect` with the real model over its
endpoint."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from openenv.core.harness import HarnessRunLimits, MCPHarnessAdapter
from openenv.core.harness.collect import (
    CollectRunner,
    EpisodeRecord,
    PushPlan,
    RolloutSerializer,
    build_model_step,
    push_to_hf_hub,
    write_dataset,
)
from openenv.core.harness.sessions import EnvSessionFactory, scripted_model_step
from openenv.core.llm_client import OpenAIClient
from openenv.testing.model_standin import ModelStandIn, ScriptedReply
from tests.support.envs import env_dirs, env_params
from tests.support.server import serve


def runner(url: str, out: Path, *, concurrency: int = 1, max_turns: int = 30, **kwargs: Any):
    return CollectRunner(
        session_factory=EnvSessionFactory(url, **kwargs),
        harness_adapter=MCPHarnessAdapter(),
        serializer=RolloutSerializer(out),
        limits=HarnessRunLimits(max_turns=max_turns),
        concurrency=concurrency,
    )


def lines(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("app", ["connect4_url", "math_url", "echo_url"])
def test_scripted_collect_on_several_environments(
    app: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue(app)
    result = runner(url, tmp_path, concurrency=2, max_turns=5).run(
        model_step=scripted_model_step, num_episodes=3
    )
    assert (result.num_collected, result.num_failed) == (3, 0)
    records = lines(tmp_path)
    assert sorted(r["episode_id"] for r in records) == ["ep-000000", "ep-000001", "ep-000002"]
    assert all(r["status"] == "collected" and r["messages"] for r in records)
    if app == "echo_url":  # no reward in that environment: None, not 0
        assert result.rewards == [None] * 3 and result.reward_summary()["mean"] is None
    else:
        assert all(isinstance(r, float) for r in result.rewards)


def test_resume_skips_what_is_written_and_runs_the_rest(connect4_url: str, tmp_path: Path):
    first = runner(connect4_url, tmp_path).run(model_step=scripted_model_step, num_episodes=2)
    assert first.num_collected == 2
    second = runner(connect4_url, tmp_path).run(model_step=scripted_model_step, num_episodes=5)
    assert (second.num_skipped, second.num_collected) == (2, 3)
    ids = [r["episode_id"] for r in lines(tmp_path)]
    assert ids.count("ep-000000") == 1 and len(set(ids)) == len(ids) == 5


def test_no_resume_keeps_the_old_file_beside_the_new(connect4_url: str, tmp_path: Path):
    runner(connect4_url, tmp_path).run(model_step=scripted_model_step, num_episodes=1)
    with pytest.warns(RuntimeWarning, match="moved the old results"):
        result = runner(connect4_url, tmp_path).run(
            model_step=scripted_model_step, num_episodes=1, resume=False
        )
    assert result.num_collected == 1 and len(list(tmp_path.glob("results.*.bak.jsonl"))) == 1


def test_filtered_episodes_are_recorded_as_dropped_not_lost(connect4_url: str, tmp_path: Path):
    # The first-legal-column policy loses to the greedy opponent: reward -1.
    result = runner(connect4_url, tmp_path).run(
        model_step=scripted_model_step,
        num_episodes=2,
        should_keep=lambda record: (record.reward or 0) >= 0,
    )
    assert (result.num_collected, result.num_dropped) == (0, 2)
    assert {r["status"] for r in lines(tmp_path)} == {"dropped"}
    assert RolloutSerializer(tmp_path).kept_records() == []
    again = runner(connect4_url, tmp_path).run(model_step=scripted_model_step, num_episodes=2)
    assert again.num_skipped == 2  # a dropped episode is not run again


def test_failures_are_written_counted_and_retried_on_resume(
    dead_url: str, connect4_url: str, tmp_path: Path
) -> None:
    result = runner(dead_url, tmp_path).run(model_step=scripted_model_step, num_episodes=2)
    assert (result.num_failed, result.num_collected) == (2, 0)
    assert set(result.failures) == {"ep-000000", "ep-000001"}
    for record in lines(tmp_path):
        assert record["status"] == "failed" and record["reward"] is None and record["error"]
    retried = runner(connect4_url, tmp_path).run(model_step=scripted_model_step, num_episodes=2)
    assert (retried.num_skipped, retried.num_collected) == (0, 2)
    assert len(RolloutSerializer(tmp_path).kept_records()) == 2


def test_a_broken_model_is_a_failure_not_a_zero(connect4_url: str, tmp_path: Path) -> None:
    def broken(messages: Any, tools: Any, sampling: Any) -> Any:
        raise ConnectionError("model server went away")

    result = runner(connect4_url, tmp_path).run(model_step=broken, num_episodes=1)
    assert result.num_failed == 1 and result.rewards == []
    (record,) = lines(tmp_path)
    assert record["reward"] is None and "model server went away" in record["error"]


def test_dataset_is_written_and_loads(connect4_url: str, tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    runner(connect4_url, tmp_path).run(model_step=scripted_model_step, num_episodes=3)
    serializer = RolloutSerializer(tmp_path)
    serializer.write_episode(EpisodeRecord.failure("ep-broken", "boom"))
    target = write_dataset(tmp_path)
    dataset = datasets.load_from_disk(str(target))
    assert dataset.num_rows == 3  # the failed episode is in results.jsonl, not the dataset
    row = dataset[0]
    assert row["messages"][0]["role"] == "user" and row["reward"] == -1.0
    call = row["messages"][1]["tool_calls"][0]
    assert call["function"]["name"] == "act" and json.loads(call["function"]["arguments"])
    assert row["messages"][2]["tool_call_id"] == call["id"]
    assert json.loads(row["tool_trace"])[0]["tool_name"] == "act"
    assert len((tmp_path / "train.jsonl").read_text().splitlines()) == 3


def test_push_dry_run_prepares_the_card_and_sends_nothing(connect4_url: str, tmp_path: Path):
    runner(connect4_url, tmp_path).run(model_step=scripted_model_step, num_episodes=1)
    RolloutSerializer(tmp_path).write_metadata({"env": "connect4"})
    plan = push_to_hf_hub(tmp_path, "someone/rollouts", dry_run=True, config_name="c4")
    assert isinstance(plan, PushPlan)
    assert plan.files == ["README.md", "train.jsonl", "results.jsonl", "metadata.json"]
    assert plan.num_episodes == 1 and plan.url.endswith("/datasets/someone/rollouts")
    card = (tmp_path / "README.md").read_text()
    assert "config_name: c4" in card and 'path: "train.jsonl"' in card
    with pytest.raises(FileNotFoundError):
        push_to_hf_hub(tmp_path / "nothing", "someone/rollouts", dry_run=True)


def test_openai_policy_through_the_model_standin(connect4_url: str, tmp_path: Path) -> None:
    script = [
        ScriptedReply(tool_calls=[{"name": "act", "arguments": {"column": 6}}]),
        ScriptedReply(text="I am done."),
    ]
    with ModelStandIn(script) as standin:
        client = OpenAIClient(standin.url, model="stand-in", api_key="unused")
        step = build_model_step(client, system_prompt="Play well.")
        result = runner(connect4_url, tmp_path).run(model_step=step, num_episodes=1)
        requests = list(standin.requests)
    assert result.num_collected == 1
    first = requests[0].body
    assert first["messages"][0] == {"role": "system", "content": "Play well."}
    assert first["tools"][0]["function"]["name"] == "act"
    (record,) = lines(tmp_path)
    assert record["tool_trace"][0]["arguments"] == {"column": 6}
    assert record["messages"][-1]["content"] == "I am done."
    assert record["metrics"]["stop_reason"] == "no_tool_calls"


@pytest.mark.slow
@pytest.mark.parametrize("env_dir", env_params(env_dirs()))
def test_collect_works_on_every_environment(env_dir: Path, tmp_path: Path) -> None:
    with serve(f"{env_dir.name}.server.app:app") as server:
        result = runner(server.url, tmp_path, max_turns=2).run(
            model_step=scripted_model_step, num_episodes=1
        )
    assert (result.num_collected, result.num_failed) == (1, 0), result.failures


def test_tasks_go_to_episodes_by_position_and_survive_resume(math_url: str, tmp_path: Path):
    def tasks():
        number = 0
        while True:  # an endless task stream is read only as far as needed
            yield {"prompt": f"task {number}", "reset_kwargs": {"seed": number}}
            number += 1

    def make() -> CollectRunner:
        return CollectRunner(
            session_factory=EnvSessionFactory(math_url),
            harness_adapter=MCPHarnessAdapter(),
            serializer=RolloutSerializer(tmp_path),
            tasks=tasks(),
            limits=HarnessRunLimits(max_turns=1),
        )

    make().run(model_step=scripted_model_step, num_episodes=1)
    make().run(model_step=scripted_model_step, num_episodes=3)
    by_id = {r["episode_id"]: r for r in lines(tmp_path)}
    for number in range(3):
        record = by_id[f"ep-{number:06d}"]
        assert record["task"]["prompt"] == f"task {number}"
        assert record["messages"][0]["content"].startswith(f"task {number}")
        assert record["artifacts"]["final_state"]["seed"] == number


def test_a_task_id_reaches_the_environment_and_its_prompt_the_model(tmp_path: Path) -> None:
    with serve("coding_env.server.app:app") as server:
        result = CollectRunner(
            session_factory=EnvSessionFactory(server.url),
            harness_adapter=MCPHarnessAdapter(),
            serializer=RolloutSerializer(tmp_path),
            tasks=[{"task_id": "add"}],
            limits=HarnessRunLimits(max_turns=1),
        ).run(model_step=scripted_model_step, num_episodes=1)
    assert result.num_collected == 1, result.failures
    (record,) = lines(tmp_path)
    assert record["artifacts"]["final_state"]["task_id"] == "add"
    assert "add" in record["messages"][0]["content"]


# -- every step's reward, every model call's tokens -------------------------------------------


def _math_questions(seed: int) -> list[tuple[int, int]]:
    """The math environment's questions for `seed` (as `MathEnvironment.reset` draws them)."""
    rng = random.Random(seed)
    return [(rng.randint(0, 99), rng.randint(0, 99)) for _ in range(3)]


def test_every_step_reward_and_the_return_are_kept(math_url: str, tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    questions = _math_questions(7)
    # Right, wrong (an integer: the format part of the grade), right: 1.0, 0.2, 1.0.
    answers = [str(a + b) for a, b in questions]
    answers[1] = str(int(answers[1]) + 1)
    script = [
        ScriptedReply(
            tool_calls=[{"name": "act", "arguments": {"answer": answer}}],
            prompt_token_ids=list(range(10 + turn)),
            token_ids=[100 + turn, 200 + turn],
            logprobs=[-0.1 * (turn + 1), -0.2],
        )
        for turn, answer in enumerate(answers)
    ]
    with ModelStandIn(script, dialects=("openai",)) as standin:
        client = OpenAIClient(standin.url, model="stand-in", api_key="unused")
        step = build_model_step(client, tool_choice="required")
        result = runner(math_url, tmp_path).run(model_step=step, num_episodes=1, seed=7)
    assert result.num_collected == 1, result.failures
    (record,) = lines(tmp_path)
    assert record["step_rewards"] == [1.0, 0.2, 1.0]
    assert record["episode_return"] == pytest.approx(2.2)
    assert record["reward"] == 1.0  # OpenEnv's meaning: the last reward the environment gave
    assert result.returns == [pytest.approx(2.2)] and result.rewards == [1.0]
    # Every call's tokens, not only the last one's.
    assert [(c["index"], c["prompt_ids"], c["completion_ids"]) for c in record["model_calls"]] == [
        (turn, list(range(10 + turn)), [100 + turn, 200 + turn]) for turn in range(3)
    ]
    assert [c["tool_calls"][0]["arguments"] for c in record["model_calls"]] == [
        {"answer": answer} for answer in answers
    ]
    write_dataset(tmp_path)
    row = datasets.load_from_disk(str(tmp_path / "dataset"))[0]
    assert row["step_rewards"] == pytest.approx([1.0, 0.2, 1.0])
    assert row["episode_return"] == pytest.approx(2.2) and row["reward"] == 1.0
    assert [c["completion_ids"] for c in row["model_calls"]] == [[100, 200], [101, 201], [102, 202]]
    assert row["model_calls"][2]["logprobs"] == pytest.approx([-0.3, -0.2])
    trained = datasets.load_dataset("json", data_files=str(tmp_path / "train.jsonl"))["train"]
    assert trained[0]["step_rewards"] == pytest.approx([1.0, 0.2, 1.0])


def test_collect_with_the_real_model_over_its_endpoint(
    real_model: Any, math_url: str, tmp_path: Path
) -> None:
    """`openenv collect` as a user runs it against a served model: the tokens of every call are
    the model's own, every step's reward is kept, and the dataset loads."""
    datasets = pytest.importorskip("datasets")
    from openenv.cli.__main__ import app
    from openenv.models.tool_format import parse_answer

    arguments = [
        "collect", "math", "--base-url", math_url, "-o", str(tmp_path),
        "--model-url", real_model.url + "/v1",  # the model name comes from the server
        "-n", "1", "--max-turns", "2", "--max-tokens", "40", "--temperature", "0",
        "--seed", "0", "--keep-losses",
    ]  # fmt: skip
    outcome = CliRunner().invoke(
        app, arguments, env={"OPENAI_API_KEY": "", "API_KEY": "", "COLUMNS": "200"}
    )
    assert outcome.exit_code == 0, outcome.output
    (record,) = lines(tmp_path)
    assert record["status"] == "collected", record["error"]
    calls = record["model_calls"]
    assert calls and len(calls) == sum(1 for m in record["messages"] if m["role"] == "assistant")
    tokenizer = real_model.engine.tokenizer
    for call in calls:
        assert call["prompt_ids"] and call["completion_ids"]
        assert len(call["logprobs"]) == len(call["completion_ids"])
        assert all(isinstance(lp, float) and lp <= 0 for lp in call["logprobs"])
        # The ids are the completion: decoded, they are what the record says the model answered.
        decoded = parse_answer(tokenizer.decode(call["completion_ids"], skip_special_tokens=True))
        assert (decoded.content or "") == call["content"]
        assert [(c["name"], c["arguments"]) for c in decoded.tool_calls] == [
            (c["name"], c["arguments"]) for c in call["tool_calls"]
        ]
    # tool_choice "required" (the default): the model acted in the environment every turn.
    assert record["tool_trace"] and all(c["tool_calls"] for c in calls)
    expected = [entry["result"]["metadata"].get("reward") for entry in record["tool_trace"]]
    assert record["step_rewards"] == expected
    given = [r for r in expected if r is not None]
    assert given, "no tool call of the model was a step the environment rewarded"
    assert record["episode_return"] == pytest.approx(math.fsum(given))
    row = datasets.load_from_disk(str(tmp_path / "dataset"))[0]
    assert row["step_rewards"] == pytest.approx(expected)
    assert [c["completion_ids"] for c in row["model_calls"]] == [c["completion_ids"] for c in calls]
    trained = datasets.load_dataset("json", data_files=str(tmp_path / "train.jsonl"))["train"]
    assert trained[0]["episode_id"] == record["episode_id"]
    metadata = json.loads((tmp_path / "metadata.json").read_text())
    assert metadata["model"] == real_model.model_name and metadata["tool_choice"] == "required"
