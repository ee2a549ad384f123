"""`openenv collect` against real servers: the scripted smoke test, resume, the reward filter,
the push dry run, clear errors (no policy named is one), an OpenAI-dialect policy through the
model stand-in (standing in for a paid model API) with its token ids and logprobs recorded,
OpenEnv's `openspiel:<game>` form, and starting the environment itself. The real model over its
endpoint: tests/harness/test_collect.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from openenv.cli.__main__ import app
from openenv.testing.model_standin import ModelStandIn, ScriptedReply
from tests.support.server import serve

NO_KEYS = {"OPENAI_API_KEY": "", "ANTHROPIC_API_KEY": "", "API_KEY": "", "COLUMNS": "200"}


@pytest.fixture(scope="module")
def connect4_url() -> Iterator[str]:
    with serve("connect4_env.server.app:app") as server:
        yield server.url


def collect(*args: str) -> Any:
    return CliRunner().invoke(app, ["collect", *args], env=NO_KEYS)


def records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def test_scripted_collect_resume_and_summary(connect4_url: str, tmp_path: Path) -> None:
    base = ["connect4", "--base-url", connect4_url, "-o", str(tmp_path), "--keep-losses"]
    base.append("--smoke-test")
    first = collect(*base, "-n", "2", "--no-dataset")
    assert first.exit_code == 0, first.output
    assert "kept" in first.output and "results:" in first.output
    second = collect(*base, "-n", "3", "--concurrency", "2", "--no-dataset")
    assert second.exit_code == 0, second.output
    assert [r["episode_id"] for r in records(tmp_path)] == ["ep-000000", "ep-000001", "ep-000002"]
    metadata = json.loads((tmp_path / "metadata.json").read_text())
    assert metadata["env_base_url"] == connect4_url and metadata["concurrency"] == 2
    assert metadata["smoke_test"] is True and metadata["model"] is None
    assert "smoke test" in second.output


def test_losses_are_dropped_by_default_and_min_reward_filters(connect4_url: str, tmp_path: Path):
    base = ["connect4", "--base-url", connect4_url, "--smoke-test", "-n", "1"]
    result = collect(*base, "-o", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert [r["status"] for r in records(tmp_path)] == ["dropped"]
    kept = tmp_path / "kept"
    result = collect(*base, "-o", str(kept), "--min-reward", "-1")
    assert [r["status"] for r in records(kept)] == ["collected"]


def test_push_to_hub_dry_run_and_dataset(connect4_url: str, tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    result = collect(
        "connect4",
        "--base-url",
        connect4_url,
        "-o",
        str(tmp_path),
        "-n",
        "1",
        "--keep-losses",
        "--provider",
        "scripted",  # OpenEnv's name of the smoke test
        "--push-to-hub",
        "me/c4-rollouts",
        "--dry-run",
        "--dataset-config",
        "c4",
    )
    assert result.exit_code == 0, result.output
    assert "dry run: would upload" in result.output and "me/c4-rollouts" in result.output
    card = (tmp_path / "README.md").read_text()
    assert (tmp_path / "dataset").is_dir() and "config_name: c4" in card
    assert "not training data" in card


def test_openspiel_family_form_passes_the_game(tmp_path: Path) -> None:
    with serve("openspiel_env.server.app:app") as server:
        result = collect(
            "openspiel:tic_tac_toe", "--base-url", server.url, "-o", str(tmp_path), "-n", "1",
            "--keep-losses", "--no-dataset", "--smoke-test",
        )  # fmt: skip
    assert result.exit_code == 0, result.output
    (record,) = records(tmp_path)
    assert record["status"] == "collected"
    assert json.loads((tmp_path / "metadata.json").read_text())["reset_kwargs"] == {
        "game_name": "tic_tac_toe"
    }


def test_openai_provider_through_the_model_standin(connect4_url: str, tmp_path: Path) -> None:
    script = [
        ScriptedReply(tool_calls=[{"name": "act", "arguments": {"column": 2}}]),
        ScriptedReply(text="done"),
    ]
    with ModelStandIn(script) as standin:
        result = collect(
            "connect4", "--base-url", connect4_url, "-o", str(tmp_path), "-n", "1",
            "--provider", "openai", "--model", "stand-in", "--llm-endpoint", standin.url,
            "--keep-losses", "--no-dataset", "--max-tokens", "50",
        )  # fmt: skip
        body = standin.requests[0].body
    assert result.exit_code == 0, result.output
    assert body["model"] == "stand-in" and body["max_tokens"] == 50
    assert body["messages"][0]["role"] == "system"
    # A tool call every turn by default; token ids and logprobs asked for, as from vLLM.
    assert body["tool_choice"] == "required"
    assert body["logprobs"] is True and body["return_token_ids"] is True
    assert records(tmp_path)[0]["tool_trace"][0]["arguments"] == {"column": 2}


def test_model_url_records_every_calls_tokens_and_names_the_servers_model(
    connect4_url: str, tmp_path: Path
) -> None:
    script = [
        ScriptedReply(
            tool_calls=[{"name": "act", "arguments": {"column": 3}}],
            prompt_token_ids=[1, 2, 3],
            token_ids=[7, 8],
            logprobs=[-0.5, -0.25],
        ),
        ScriptedReply(
            text="done", prompt_token_ids=[1, 2, 3, 7, 8, 4], token_ids=[9], logprobs=[-1.0]
        ),
    ]
    with ModelStandIn(script, model="served-name", dialects=("openai",)) as standin:
        result = collect(
            "connect4", "--base-url", connect4_url, "-o", str(tmp_path), "-n", "1",
            "--model-url", standin.url + "/v1", "--tool-choice", "auto", "--keep-losses",
        )  # fmt: skip
        body = standin.requests[0].body
    assert result.exit_code == 0, result.output
    assert body["model"] == "served-name" and body["tool_choice"] == "auto"
    (record,) = records(tmp_path)
    calls = [
        (c["prompt_ids"], c["completion_ids"], c["logprobs"], c["content"])
        for c in record["model_calls"]
    ]
    assert calls == [
        ([1, 2, 3], [7, 8], [-0.5, -0.25], ""),
        ([1, 2, 3, 7, 8, 4], [9], [-1.0], "done"),
    ]
    metadata = json.loads((tmp_path / "metadata.json").read_text())
    assert (metadata["model"], metadata["smoke_test"]) == ("served-name", False)


def test_anthropic_provider_through_the_model_standin(connect4_url: str, tmp_path: Path) -> None:
    script = [ScriptedReply(tool_calls=[{"name": "act", "arguments": {"column": 4}}])]
    with ModelStandIn([*script, ScriptedReply(text="done")]) as standin:
        result = collect(
            "connect4", "--base-url", connect4_url, "-o", str(tmp_path), "-n", "1",
            "--provider", "anthropic", "--model", "stand-in", "--llm-endpoint", standin.url,
            "--keep-losses", "--no-dataset",
        )  # fmt: skip
        dialects = {request.dialect for request in standin.requests}
    assert result.exit_code == 0, result.output
    assert dialects == {"anthropic"}
    assert records(tmp_path)[0]["tool_trace"][0]["arguments"] == {"column": 4}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--provider", "openai", "--model", "m"], "OPENAI_API_KEY"),
        (["--provider", "openai"], "--model is required"),
        (["--provider", "nope", "--model", "m"], "unknown --provider"),
        (["--dry-run"], "--dry-run goes with --push-to-hub"),
        ([], "no policy: collect needs a model"),
        (["--model-url", "http://127.0.0.1:9", "--local-model"], "give one"),
    ],
    ids=["no-key", "no-model", "bad-provider", "dry-run-alone", "no-policy", "two-policies"],
)
def test_errors_say_what_to_do(connect4_url: str, tmp_path: Path, args: list[str], message: str):
    result = collect("connect4", "--base-url", connect4_url, "-o", str(tmp_path), *args)
    assert result.exit_code == 1 and message in result.output


def test_an_unreachable_base_url_says_so(tmp_path: Path) -> None:
    from openenv.testing.live_server import free_port

    url = f"http://127.0.0.1:{free_port()}"
    result = collect("connect4", "--base-url", url, "-o", str(tmp_path), "--smoke-test")
    assert result.exit_code == 1 and "is the environment running" in result.output


@pytest.mark.slow
def test_without_base_url_the_environment_is_started_and_stopped(tmp_path: Path) -> None:
    result = collect(
        "connect4", "-o", str(tmp_path), "-n", "2", "--keep-losses", "--no-dataset", "--smoke-test"
    )
    assert result.exit_code == 0, result.output
    assert "starting connect4" in result.output
    url = json.loads((tmp_path / "metadata.json").read_text())["env_base_url"]
    import httpx

    with pytest.raises(httpx.HTTPError):
        httpx.get(url + "/health", timeout=5)
