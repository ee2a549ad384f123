"""`check_env` and `check_server`: the checks of `checks.py` through either driver."""

from __future__ import annotations

from typing import Any, Optional

from openenv.core.env_server.types import Action, Observation, State
from openenv.core.utils import run_coroutine_sync

from .checks import DEFAULT_STEPS, Checker
from .drivers import InProcessDriver, UrlDriver
from .report import CheckReport


async def acheck_env(
    env: Any,
    action_cls: Optional[type[Action]] = None,
    observation_cls: Optional[type[Observation]] = None,
    *,
    state_cls: Optional[type[State]] = None,
    sample_actions: Optional[list[Any]] = None,
    seed: int = 0,
    steps: int = DEFAULT_STEPS,
    raise_on_failure: bool = True,
) -> CheckReport:
    """`check_env` for callers already inside an event loop."""
    driver = InProcessDriver(env, action_cls, observation_cls, state_cls)
    name = InProcessDriver.target(env)
    report = CheckReport(name, "environment_class", environment=name, standard_version="local")
    report.standard_profile = "openenv-class"
    await Checker(driver, report, sample_actions, seed, steps).run()
    return report.raise_for_failures() if raise_on_failure else report


def check_env(
    env: Any,
    action_cls: Optional[type[Action]] = None,
    observation_cls: Optional[type[Observation]] = None,
    *,
    state_cls: Optional[type[State]] = None,
    sample_actions: Optional[list[Any]] = None,
    seed: int = 0,
    steps: int = DEFAULT_STEPS,
    raise_on_failure: bool = True,
) -> CheckReport:
    """Check an environment in-process, like Gymnasium's `check_env`.

    `env` is an `Environment` subclass or a factory (called once per session it needs; an
    instance is accepted too, but then isolation and close are not checked). The action,
    observation and state classes default to the ones the class declares
    (`Environment[MyAction, MyObservation, MyState]` or annotations); MCP environments use
    `CallToolAction`.

    `sample_actions` (Action instances or wire dicts) drive the episodes; by default the action
    schema's declared `examples` are played, else actions are generated from the schema (see
    `openenv.testing.samples`) or, for MCP environments, from the tools' input schemas. Each
    episode is `reset(seed=seed)` followed by at most `steps` actions, ending early at `done`.

    Returns a `CheckReport`; with `raise_on_failure` (the default) raises `EnvCheckError`
    listing every failed check instead. Works from sync code and inside a running event loop.
    """
    return run_coroutine_sync(
        acheck_env(
            env,
            action_cls,
            observation_cls,
            state_cls=state_cls,
            sample_actions=sample_actions,
            seed=seed,
            steps=steps,
            raise_on_failure=raise_on_failure,
        )
    )


async def acheck_server(
    base_url: str,
    *,
    sample_actions: Optional[list[Any]] = None,
    seed: int = 0,
    steps: int = DEFAULT_STEPS,
    timeout_s: float = 10.0,
    headers: Optional[dict[str, str]] = None,
    raise_on_failure: bool = True,
    report: Optional[CheckReport] = None,
) -> CheckReport:
    """`check_server` for callers already inside an event loop; `report` is added to."""
    driver = UrlDriver(base_url, timeout_s, headers)
    report = report or CheckReport(driver.base, "running_environment")
    await Checker(driver, report, sample_actions, seed, steps).run()
    return report.raise_for_failures() if raise_on_failure else report


def check_server(
    base_url: str,
    *,
    sample_actions: Optional[list[Any]] = None,
    seed: int = 0,
    steps: int = DEFAULT_STEPS,
    timeout_s: float = 10.0,
    headers: Optional[dict[str, str]] = None,
    raise_on_failure: bool = True,
) -> CheckReport:
    """Check a running environment server over the wire (what `openenv validate URL` runs).

    OpenEnv's endpoint criteria (/health, /openapi.json's 1.x version and the mode its paths
    imply, POST /mcp), then the shared checks over `/ws` (metadata, schemas, seeded episodes run
    twice for determinism, invalid actions, two concurrent sessions), then the HTTP transport
    (a session episode, a stateless reset) and that every session was released. Observations
    and states must match the schemas the server publishes.

    `sample_actions` are wire dicts or Action models; by default the published action schema's
    `examples`, else generated. Returns a `CheckReport`; with `raise_on_failure` (the default)
    raises `EnvCheckError` listing every failed check.
    """
    return run_coroutine_sync(
        acheck_server(
            base_url,
            sample_actions=sample_actions,
            seed=seed,
            steps=steps,
            timeout_s=timeout_s,
            headers=headers,
            raise_on_failure=raise_on_failure,
        )
    )
