"""`check_env`: good environments pass; each purposely broken one fails the check meant for it.

The environments here are also served by `test_check_server.py` (see `multi_app` there).
"""

from __future__ import annotations

import functools
import json
import random
from typing import Any
from uuid import uuid4

import pytest
from pydantic import ConfigDict, Field

from echo_env.server.echo_environment import EchoEnvironment
from openenv.core.env_server import (
    Action,
    CallToolAction,
    CallToolObservation,
    Environment,
    Observation,
    State,
)
from openenv.core.errors import InvalidActionError
from openenv.testing import CheckReport, EnvCheckError, acheck_env, check_env
from tests.apps.counter import CounterAction, CounterEnv, CounterObservation

EPISODE_STEPS = 4

# -- a small, correct environment and its broken variants ------------------------------------


class CountAction(Action):
    amount: int = Field(ge=0, le=5)


class CountObservation(Observation):
    count: int = 0


class CountState(State):
    count: int = 0


class GoodEnv(Environment[CountAction, CountObservation, CountState]):
    """Seeded start, ends after EPISODE_STEPS steps, refuses to step a finished episode."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = CountState(episode_id=str(uuid4()))
        self._done = False

    def _start(self, seed: int | None) -> int:
        return random.Random(seed).randint(0, 9)

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> CountObservation:
        self._done = False
        self._state = CountState(episode_id=episode_id or str(uuid4()), count=self._start(seed))
        return CountObservation(count=self._state.count, reward=0.0)

    def _after_done(self, action: CountAction) -> Any:
        raise RuntimeError("the episode is over; call reset() to start a new one")

    def step(self, action: CountAction, timeout_s: float | None = None, **kwargs: Any) -> Any:
        if self._done:
            return self._after_done(action)
        st = self._state
        st.step_count += 1
        st.count += action.amount
        self._done = st.step_count >= EPISODE_STEPS
        return CountObservation(count=st.count, reward=float(action.amount), done=self._done)

    @property
    def state(self) -> CountState:
        return self._state


class DoneObservationEnv(GoodEnv):
    """After done, keeps answering with a done observation."""

    def _after_done(self, action: CountAction) -> Any:
        return CountObservation(count=self._state.count, reward=0.0, done=True)


class ContinuesAfterDoneEnv(GoodEnv):
    """After done, silently carries on (done=False): a warning."""

    def _after_done(self, action: CountAction) -> Any:
        self._done = False
        return CountObservation(count=self._state.count, done=False)


class NondeterministicEnv(GoodEnv):
    """BROKEN: the start ignores the seed (global random state)."""

    def _start(self, seed: int | None) -> int:
        return random.randint(0, 10**9)


class SharedStateEnv(GoodEnv):
    """BROKEN: the step history lives in a class attribute, shared by every instance."""

    _history: list[int] = []

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any):
        self._history.clear()
        return super().reset(seed=seed, episode_id=episode_id)

    def step(self, action: CountAction, timeout_s: float | None = None, **kwargs: Any) -> Any:
        self._history.append(action.amount)
        return super().step(action)

    @property
    def state(self) -> CountState:
        st = self._state
        return CountState(
            episode_id=st.episode_id, step_count=len(self._history), count=sum(self._history)
        )


class SharedStateObjectEnv(GoodEnv):
    """BROKEN: one State object at class level, handed out by every instance."""

    _shared = CountState()

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any):
        obs = super().reset(seed=seed, episode_id=episode_id)
        self._shared.count = self._state.count
        self._shared.step_count = 0
        self._state = self._shared
        return obs


class DictStepEnv(GoodEnv):
    """BROKEN: step returns a plain dict instead of an Observation."""

    def step(self, action: CountAction, timeout_s: float | None = None, **kwargs: Any) -> Any:
        obs = super().step(action)
        if not isinstance(obs, CountObservation):
            return obs
        return {"count": obs.count, "reward": obs.reward, "done": obs.done}


class HandleObservation(CountObservation):
    handle: Any = None


class UnserializableEnv(Environment[CountAction, HandleObservation, CountState]):
    """BROKEN: step observations carry an object JSON cannot encode."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = CountState()

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any):
        self._state = CountState(episode_id=episode_id)
        return HandleObservation(count=0)

    def step(self, action: CountAction, timeout_s: float | None = None, **kwargs: Any):
        self._state.step_count += 1
        return HandleObservation(count=action.amount, handle=object())

    @property
    def state(self) -> CountState:
        return self._state


class PickyAction(Action):
    """Only some amounts are legal, which the schema cannot say: the legal ones are declared."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"amount": 3}, {"amount": 5}]})
    amount: int = Field(ge=0, le=5)


class PickyEnv(Environment[PickyAction, CountObservation, CountState]):
    """Refuses an illegal amount the way a game refuses an illegal move."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._env = GoodEnv()

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any):
        return self._env.reset(seed=seed, episode_id=episode_id)

    def step(self, action: PickyAction, timeout_s: float | None = None, **kwargs: Any) -> Any:
        if action.amount not in (3, 5):
            errors = [{"loc": ["amount"], "msg": "not legal here", "type": "value_error"}]
            raise InvalidActionError(f"amount {action.amount} is not legal here", errors)
        return self._env.step(CountAction(amount=action.amount))

    @property
    def state(self) -> CountState:
        return self._env.state


class LooseAction(Action):
    """BROKEN: accepts any field with any value."""

    model_config = ConfigDict(extra="allow")
    payload: Any = None


class LooseActionEnv(Environment[LooseAction, CountObservation, CountState]):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = CountState()

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any):
        self._state = CountState(episode_id=episode_id)
        return CountObservation(count=0)

    def step(self, action: LooseAction, timeout_s: float | None = None, **kwargs: Any):
        self._state.step_count += 1
        self._state.count += 1
        return CountObservation(count=self._state.count)

    @property
    def state(self) -> CountState:
        return self._state


# -- helpers ----------------------------------------------------------------------------------


def run(env: Any, **kwargs: Any) -> CheckReport:
    return check_env(env, raise_on_failure=False, **kwargs)


def failed_names(report: CheckReport) -> set[str]:
    return {r.name for r in report.failures}


# -- environments that pass -------------------------------------------------------------------


def test_counter_app_env_passes() -> None:
    report = check_env(CounterEnv, CounterAction, CounterObservation)
    assert report.ok, report
    for name in (
        "types",
        "reset",
        "state",
        "step",
        "schema_endpoint",
        "metadata_endpoint",
        "observation_roundtrip",
        "observation_schema",
        "action_roundtrip",
        "state_roundtrip",
        "determinism",
        "invalid_action_unknown_field",
        "invalid_action_wrong_type",
        "invalid_action_missing_field",
        "isolation",
        "close",
    ):
        assert report[name].passed and not report[name].skipped, report[name]
    # The counter never ends an episode: said so, not failed.
    assert report["step_after_done"].skipped
    assert "did not end" in report["step_after_done"].detail or "no episode ended" in (
        report["step_after_done"].detail
    )
    # Types come from the Environment[...] generics when not given.
    assert check_env(CounterEnv).ok


def test_echo_env_passes() -> None:
    report = check_env(EchoEnvironment, CallToolAction, CallToolObservation)
    assert report.ok, report
    assert report["mcp_tools"].passed
    assert "echo_message" in report["mcp_tools"].detail
    # Sample actions are tool calls built from the tools' input schemas.
    assert "echo_message" in report["sample_actions"].detail
    assert report["step"].passed and not report["step"].skipped
    # Tool results follow the published CallToolObservation schema; the reset is exempt.
    assert "CallToolObservation schema (2 MCP reset" in report["observation_schema"].detail
    # MCP environments need no declared types.
    assert check_env(EchoEnvironment).ok


def test_good_env_raises_after_done() -> None:
    report = check_env(GoodEnv)
    result = report["step_after_done"]
    assert result.passed and not result.skipped
    assert "refused with EXECUTION_ERROR" in result.detail
    assert "raised RuntimeError" in result.detail
    assert "call reset()" in result.detail
    assert f"done after {EPISODE_STEPS}" in report["step"].detail


def test_done_observation_after_done_is_reported() -> None:
    result = check_env(DoneObservationEnv)["step_after_done"]
    assert result.passed and "done observation" in result.detail


def test_continuing_after_done_is_a_warning() -> None:
    report = run(ContinuesAfterDoneEnv)
    assert report.ok  # a warning does not fail the report
    result = report["step_after_done"]
    assert not result.passed and result.severity == "warning" and result.status == "warn"
    assert "silently continues" in result.detail
    assert report.warnings == [result]


def test_declared_sample_actions_are_played() -> None:
    report = check_env(PickyEnv)
    assert "2 actions declared (the action schema's examples)" in report["sample_actions"].detail
    assert report["step"].passed and f"done after {EPISODE_STEPS}" in report["step"].detail
    # Without the declaration, generated amounts are illegal moves, and the report says what to do.
    PlainAction = type("PlainAction", (CountAction,), {})
    report = run(PickyEnv, action_cls=PlainAction)
    assert failed_names(report) == {"step"}, report
    assert "VALIDATION_ERROR: amount 1 is not legal here" in report["step"].detail
    assert "declare legal sample actions" in report["step"].detail


def test_factories_and_explicit_sample_actions() -> None:
    assert check_env(lambda: GoodEnv(), CountAction, CountObservation).ok
    assert check_env(functools.partial(GoodEnv)).ok
    report = check_env(
        GoodEnv, sample_actions=[CountAction(amount=5), {"amount": 0}, {"amount": 2}]
    )
    assert "3 actions given" in report["sample_actions"].detail


def test_invalid_explicit_sample_actions_are_reported() -> None:
    report = run(GoodEnv, sample_actions=[{"amount": 99}])
    result = report["sample_actions"]
    assert not result.passed
    assert "amount" in result.detail and "greater than the maximum of 5" in result.detail
    assert report["step"].skipped and report["determinism"].skipped


def test_an_instance_is_accepted() -> None:
    env = GoodEnv()
    report = check_env(env)
    assert report["isolation"].skipped and report["close"].skipped
    assert report["determinism"].passed


# -- broken environments fail the check meant for them ---------------------------------------


def test_nondeterministic_seed_fails_determinism() -> None:
    report = run(NondeterministicEnv)
    assert failed_names(report) == {"determinism"}, report
    detail = report["determinism"].detail
    assert detail.startswith("NOT DETERMINISTIC")
    assert "reset(seed=0) twice" in detail
    assert "reset observations differ at count" in detail
    assert "random.Random(seed)" in detail


def test_volatile_observation_fields_are_left_out_of_determinism() -> None:
    class TimedObservation(CountObservation):
        took_s: float = Field(default=0.0, json_schema_extra={"volatile": True})

    class TimedEnv(GoodEnv):
        def reset(self, seed=None, episode_id=None, **kwargs: Any):
            obs = super().reset(seed=seed, episode_id=episode_id)
            return TimedObservation(**obs.model_dump(), took_s=random.random())

    report = run(TimedEnv, observation_cls=TimedObservation)
    assert report["determinism"].passed, report["determinism"].detail


def test_nondeterministic_state_only_is_a_warning() -> None:
    class TokenState(CountState):
        token: str = ""

    class TokenEnv(GoodEnv):
        def reset(self, seed=None, episode_id=None, **kwargs: Any):
            obs = super().reset(seed=seed, episode_id=episode_id)
            self._state = TokenState(**self._state.model_dump(), token=uuid4().hex)
            return obs

    report = run(TokenEnv)
    result = report["determinism"]
    assert not result.passed and result.severity == "warning"
    assert "state is not" in result.detail and "token" in result.detail
    assert report.ok


@pytest.mark.parametrize("env_cls", [SharedStateEnv, SharedStateObjectEnv])
def test_shared_class_state_fails_isolation(env_cls: type) -> None:
    report = run(env_cls)
    assert failed_names(report) == {"isolation"}, report
    detail = report["isolation"].detail
    assert "changed ANOTHER session's state" in detail
    assert "class-level" in detail


def test_shared_state_is_a_warning_for_single_session_envs() -> None:
    class SingleSession(SharedStateEnv):
        SUPPORTS_CONCURRENT_SESSIONS = False

    report = run(SingleSession)
    assert report.ok
    result = report["isolation"]
    assert not result.passed and result.severity == "warning"
    assert "SUPPORTS_CONCURRENT_SESSIONS is False" in result.detail


def test_step_returning_a_dict_fails_step() -> None:
    report = run(DictStepEnv)
    assert failed_names(report) == {"step"}, report
    detail = report["step"].detail
    assert "step() returned dict" in detail
    assert "expected an Observation (CountObservation)" in detail
    assert "EXECUTION_ERROR" in detail


def test_unserializable_observation_fails_step() -> None:
    report = run(UnserializableEnv)
    assert failed_names(report) == {"step"}, report
    detail = report["step"].detail
    assert "HandleObservation is not JSON serializable" in detail
    assert "'handle' (object" in detail


def test_action_model_accepting_anything_fails_invalid_action() -> None:
    report = run(LooseActionEnv)
    assert failed_names(report) == {"invalid_action_unknown_field"}, report
    detail = report["invalid_action_unknown_field"].detail
    assert "it was ACCEPTED (the environment stepped" in detail
    assert "openenv_check_unknown_field" in detail
    assert "extra='forbid'" in detail
    # Nothing typed to violate and nothing required: said so.
    assert report["invalid_action_wrong_type"].skipped
    assert report["invalid_action_missing_field"].skipped


def test_wrong_observation_and_state_types_are_reported() -> None:
    class WrongTypes(GoodEnv):
        def reset(self, seed=None, episode_id=None, **kwargs: Any):
            super().reset(seed=seed, episode_id=episode_id)
            return Observation()

        @property
        def state(self) -> Any:
            return {"step_count": 0}

    report = run(WrongTypes)
    assert "not a CountObservation" in report["reset"].detail
    assert "state returned dict" in report["state"].detail
    assert {"reset", "state"} <= failed_names(report)


def test_close_failure_and_missing_types_are_reported() -> None:
    class BadClose(GoodEnv):
        def close(self) -> None:
            raise OSError("port still in use")

    report = run(BadClose)
    assert failed_names(report) == {"close"}
    assert "OSError: port still in use" in report["close"].detail

    class Untyped(Environment):
        def reset(self, seed=None, episode_id=None, **kwargs: Any):
            return Observation()

        def step(self, action, timeout_s=None, **kwargs: Any):
            return Observation()

        @property
        def state(self) -> State:
            return State()

    report = run(Untyped)
    assert "pass action_cls" in report["types"].detail
    assert report["sample_actions"].skipped


def test_construction_failure_stops_early() -> None:
    def factory() -> Environment:
        raise RuntimeError("no GPU")

    report = run(factory)
    assert report.names == ["construct"]
    assert "RuntimeError: no GPU" in report["construct"].detail


# -- the report ---------------------------------------------------------------------------------


def test_env_check_error_lists_every_failed_check() -> None:
    class TwiceBroken(NondeterministicEnv, SharedStateEnv):
        pass

    with pytest.raises(EnvCheckError) as info:
        check_env(TwiceBroken)
    message = str(info.value)
    assert "2 check(s) failed for TwiceBroken" in message
    assert "- determinism: NOT DETERMINISTIC" in message
    assert "- isolation:" in message
    assert {r.name for r in info.value.failures} == {"determinism", "isolation"}
    assert isinstance(info.value, AssertionError)


def test_report_renders_as_text_json_and_rich() -> None:
    report = run(NondeterministicEnv)
    text = str(report)
    assert text.splitlines()[0].startswith("NondeterministicEnv: FAILED")
    assert any(line.strip().startswith("FAIL  determinism") for line in text.splitlines())
    assert any(line.strip().startswith("PASS  isolation") for line in text.splitlines())

    # The JSON is OpenEnv's `validate --json` document, as for servers and folders.
    data = json.loads(report.to_json())
    assert data["passed"] is False and data["validation_type"] == "environment_class"
    assert data["summary"]["failed_criteria"] == ["determinism"]
    check = next(c for c in data["criteria"] if c["id"] == "determinism")
    assert check["status"] == "fail" and check["required"] is True
    assert check["description"] == "the same seed and actions give the same episode"

    from rich.console import Console

    console = Console(record=True, width=200)
    console.print(report)
    rendered = console.export_text()
    assert "determinism" in rendered and "FAIL" in rendered
    assert "determinism" in report and len(report) == len(report.names)
    with pytest.raises(KeyError, match="checks run"):
        report["nope"]


async def test_usable_inside_a_running_event_loop() -> None:
    report = await acheck_env(GoodEnv)
    assert report.ok
    assert check_env(EchoEnvironment).ok  # the sync form too (runs on a helper thread)
