"""`check_server`: real servers pass; servers of broken environments fail the matching check.

One uvicorn process serves everything: `multi_app` below mounts the echo env, the counter app
and one app per environment of `test_check_env.py`, each under its own path prefix.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fastapi import FastAPI

from echo_env.server.app import app as echo_app
from openenv.core.env_server import create_app
from openenv.testing import CheckReport, EnvCheckError, acheck_server, check_server
from tests.apps.counter import CounterAction
from tests.apps.counter import app as counter_app
from tests.support.server import RunningServer, free_port, serve
from tests.testing.test_check_env import (
    CountAction,
    CountObservation,
    DictStepEnv,
    GoodEnv,
    HandleObservation,
    LooseAction,
    LooseActionEnv,
    NondeterministicEnv,
    PickyAction,
    PickyEnv,
    SharedStateEnv,
    UnserializableEnv,
)

MOUNTED = {
    "echo": echo_app,
    "counter": counter_app,
    "picky": create_app(PickyEnv, PickyAction, CountObservation),
    "good": create_app(GoodEnv, CountAction, CountObservation, env_name="good"),
    "nondeterministic": create_app(NondeterministicEnv, CountAction, CountObservation),
    "shared": create_app(SharedStateEnv, CountAction, CountObservation),
    "dict_step": create_app(DictStepEnv, CountAction, CountObservation),
    "loose": create_app(LooseActionEnv, LooseAction, CountObservation),
    "unserializable": create_app(UnserializableEnv, CountAction, HandleObservation),
    "single": create_app(GoodEnv, CountAction, CountObservation, max_concurrent_envs=1),
    "production": create_app(GoodEnv, CountAction, CountObservation, mode="production"),
}

multi_app = FastAPI()


@multi_app.get("/health")
async def health() -> dict[str, str]:  # for tests.support.server.wait_healthy
    return {"status": "healthy"}


for _name, _app in MOUNTED.items():
    multi_app.mount(f"/{_name}", _app)


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with serve("tests.testing.test_check_server:multi_app") as running:
        yield running


def url_of(server: RunningServer, name: str) -> str:
    return f"{server.url}/{name}"


def run(url: str, **kwargs) -> CheckReport:
    return check_server(url, raise_on_failure=False, **kwargs)


def failed_names(report: CheckReport) -> set[str]:
    return {r.name for r in report.failures}


# -- servers that pass ----------------------------------------------------------------------------


def test_counter_server_passes(server: RunningServer) -> None:
    report = check_server(url_of(server, "counter"))
    assert report.ok and not report.warnings, report
    for name in (
        "health_endpoint",
        "mcp_endpoint",
        "mode_endpoint_consistency",
        "metadata_endpoint",
        "schema_endpoint",
        "openapi_version_available",
        "reset",
        "step",
        "state",
        "determinism",
        "invalid_action_unknown_field",
        "invalid_action_wrong_type",
        "invalid_action_missing_field",
        "http_session",
        "http_stateless",
        "observation_schema",
        "state_schema",
        "isolation",
        "sessions_released",
    ):
        assert report[name].passed and not report[name].skipped, report[name]
    assert report["mcp_tools"].skipped  # not an MCP environment
    assert "VALIDATION_ERROR" in report["invalid_action_wrong_type"].detail
    assert "POST /step 422" in report["invalid_action_wrong_type"].detail


def test_echo_server_passes(server: RunningServer) -> None:
    report = check_server(url_of(server, "echo"))
    assert report.ok and not report.warnings, report
    mcp = report["mcp_tools"]
    assert mcp.passed and not mcp.skipped
    assert "echo_message" in mcp.detail and "echo_with_length" in mcp.detail
    assert "tool_name" in report["sample_actions"].detail
    # The reset observation is the echo env's own type; tool results follow the schema.
    assert "exempt" in report["observation_schema"].detail


def test_episode_that_ends_and_explicit_samples(server: RunningServer) -> None:
    report = check_server(
        url_of(server, "good"), sample_actions=[CountAction(amount=1), {"amount": 2}]
    )
    assert report.ok, report
    assert "2 actions given" in report["sample_actions"].detail
    after_done = report["step_after_done"]
    assert after_done.passed and not after_done.skipped
    assert "EXECUTION_ERROR" in after_done.detail and "call reset()" in after_done.detail


def test_declared_sample_actions_come_from_the_published_schema(server: RunningServer) -> None:
    report = check_server(url_of(server, "picky"))
    assert report.ok, report
    assert "2 actions declared (the action schema's examples)" in report["sample_actions"].detail
    assert report["step_after_done"].passed and not report["step_after_done"].skipped


def test_invalid_sample_actions_are_reported(server: RunningServer) -> None:
    report = run(
        url_of(server, "counter"), sample_actions=[CounterAction(amount=1), {"amount": "x"}]
    )
    result = report["sample_actions"]
    assert not result.passed
    assert "#1" in result.detail and "amount" in result.detail
    assert report["step"].skipped and report["isolation"].skipped


# -- broken servers -------------------------------------------------------------------------------


def test_nondeterministic_server_fails_determinism(server: RunningServer) -> None:
    report = run(url_of(server, "nondeterministic"))
    assert failed_names(report) == {"determinism"}, report
    detail = report["determinism"].detail
    assert detail.startswith("NOT DETERMINISTIC")
    assert "reset observations differ at count" in detail
    # /ws and HTTP disagree too (a warning only).
    assert report["transport_consistency"].status == "warn"


def test_shared_state_server_fails_isolation(server: RunningServer) -> None:
    report = run(url_of(server, "shared"))
    assert failed_names(report) == {"isolation"}, report
    detail = report["isolation"].detail
    assert "changed ANOTHER session's state" in detail
    assert "SUPPORTS_CONCURRENT_SESSIONS" in detail


def test_dict_step_server_fails_step(server: RunningServer) -> None:
    report = run(url_of(server, "dict_step"))
    assert "step" in failed_names(report), report
    detail = report["step"].detail
    assert "EXECUTION_ERROR" in detail
    assert "returned dict, expected an Observation" in detail


def test_unserializable_observation_server_fails_step(
    server: RunningServer,
) -> None:
    report = run(url_of(server, "unserializable"))
    assert "step" in failed_names(report), report
    assert "not JSON serializable" in report["step"].detail


def test_loose_action_server_fails_invalid_action(server: RunningServer) -> None:
    report = run(url_of(server, "loose"))
    assert failed_names(report) == {"invalid_action_unknown_field"}, report
    detail = report["invalid_action_unknown_field"].detail
    assert "it was ACCEPTED" in detail
    assert "POST /step answered 200, not 422" in detail


def test_unreachable_server() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(EnvCheckError) as info:
        check_server(url, timeout_s=2.0)
    report = info.value.report
    assert report.names == ["health_endpoint"]
    assert "nothing answers at" in report["health_endpoint"].detail
    assert "1 check(s) failed" in str(info.value)


async def test_async_form_and_json_output(server: RunningServer) -> None:
    report = await acheck_server(url_of(server, "counter"), steps=3)
    data = json.loads(report.to_json())
    assert data["passed"] is True and data["validation_type"] == "running_environment"
    assert data["target"] == url_of(server, "counter")
    names = [c["id"] for c in data["criteria"]]
    assert names[0] == "health_endpoint" and "isolation" in names
    assert "3 of 3 steps" in report["step"].detail


def test_single_session_server(server: RunningServer) -> None:
    report = check_server(url_of(server, "single"))
    assert report.ok and not report.warnings, report
    assert report["http_session"].passed and not report["http_session"].skipped
    result = report["isolation"]
    assert result.skipped and "max_sessions=1" in result.detail


def test_production_mode_server(server: RunningServer) -> None:
    report = check_server(url_of(server, "production"))
    assert report.ok and not report.warnings, report
    assert report["step"].passed and report["determinism"].passed
    assert report["http_session"].skipped and "production mode" in report["http_session"].detail
    assert report["http_stateless"].skipped
    assert "no HTTP /step" in report["invalid_action_unknown_field"].detail
