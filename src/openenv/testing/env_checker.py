"""`check_env`: in-process checks of an environment class or factory."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import typing
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import orjson
from pydantic import BaseModel, ValidationError

from openenv.core.env_server.interfaces import Environment, overrides, state_class_of
from openenv.core.env_server.serialization import deserialize_action, serialize_observation
from openenv.core.env_server.sessions import factory_class, factory_name, filter_kwargs
from openenv.core.env_server.types import Action, Observation, State
from openenv.core.errors import exception_message as _exc
from openenv.core.protocol import dumps, loads
from openenv.core.utils import run_coroutine_sync

from ._jsonutil import (
    check_schema,
    first_difference,
    normalize,
    schema_validator_name,
    short,
    unserializable_fields,
    validate,
    without,
)
from .report import CheckReport
from .samples import (
    UNKNOWN_FIELD,
    missing_field_probe,
    sample_actions_from_schema,
    tool_call_samples,
    wrong_type_probe,
)

#: Default number of actions per checked episode (it stops earlier when `done`).
DEFAULT_STEPS = 10
_ISOLATION_STEPS = 3

EnvSource = Any  # an Environment subclass, a factory returning one, or an instance


def _is_mcp(env: Any) -> bool:
    from openenv.core.env_server.mcp_environment import MCPEnvironment

    return isinstance(env, MCPEnvironment)


def _done(obs: Any) -> bool:
    if isinstance(obs, Observation):
        return bool(obs.done)
    if isinstance(obs, dict):
        return bool(obs.get("done"))
    return False


def _proper_subclass(value: Any, base: type) -> bool:
    return isinstance(value, type) and issubclass(value, base) and value is not base


def declared_types(env_cls: Any) -> tuple[type | None, type | None, type | None]:
    """`(action, observation, state)` classes an environment class declares.

    Read from `Environment[MyAction, MyObservation, MyState]` generics, then from the
    annotations of `step(action: ...)`, of the `step` / `reset` return values and of the
    `state` property. The base classes themselves do not count as declarations.
    """
    found: dict[type, type | None] = {Action: None, Observation: None, State: None}
    if not isinstance(env_cls, type):
        return None, None, None
    for klass in env_cls.__mro__:
        for base in getattr(klass, "__orig_bases__", ()):
            for arg in typing.get_args(base):
                for kind in found:
                    if found[kind] is None and _proper_subclass(arg, kind):
                        found[kind] = arg
    with contextlib.suppress(Exception):
        hints = typing.get_type_hints(env_cls.step)
        hint = hints.get("action")
        if found[Action] is None and _proper_subclass(hint, Action):
            found[Action] = hint
        hint = hints.get("return")
        if found[Observation] is None and _proper_subclass(hint, Observation):
            found[Observation] = hint
    with contextlib.suppress(Exception):
        hint = typing.get_type_hints(env_cls.reset).get("return")
        if found[Observation] is None and _proper_subclass(hint, Observation):
            found[Observation] = hint
    if found[State] is None:
        st = state_class_of(env_cls)
        found[State] = st if st is not State else None
    return found[Action], found[Observation], found[State]


class _Instance:
    """One environment instance, driven the way the server drives it: `reset_async` /
    `step_async` when overridden, else the sync methods on a worker thread; keyword arguments
    the method does not declare are dropped; `mcp_session()` is entered when present."""

    def __init__(self, env: Any, executor: ThreadPoolExecutor) -> None:
        self.env = env
        self._executor = executor
        self._stack: contextlib.AsyncExitStack | None = None
        self.closed = False

    async def _sync(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        call = functools.partial(fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    async def enter(self) -> None:
        enter = getattr(self.env, "mcp_session", None)
        if callable(enter):
            self._stack = contextlib.AsyncExitStack()
            await self._stack.enter_async_context(enter())

    async def reset(self, **kwargs: Any) -> Any:
        env = self.env
        if overrides(type(env), "reset_async"):
            return await env.reset_async(**filter_kwargs(env.reset_async, kwargs))
        return await self._sync(env.reset, **filter_kwargs(env.reset, kwargs))

    async def step(self, action: Any) -> Any:
        env = self.env
        if overrides(type(env), "step_async"):
            return await env.step_async(action)
        return await self._sync(env.step, action)

    async def state(self) -> Any:
        return await self._sync(lambda: self.env.state)

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._stack is not None:
            stack, self._stack = self._stack, None
            await stack.aclose()
        await self._sync(self.env.close)


@dataclass
class _Run:
    """One episode: reset(seed) then the actions until done, an error or the end."""

    reset_obs: Any = None
    reset_error: BaseException | None = None
    observations: list[Any] = field(default_factory=list)
    #: normalised state (without episode_id) after reset and after each step
    states: list[Any] = field(default_factory=list)
    state_objects: list[Any] = field(default_factory=list)
    state_error: BaseException | None = None
    step_error: tuple[int, BaseException] | None = None
    done_at: int | None = None


class _EnvChecker:
    def __init__(
        self,
        source: EnvSource,
        action_cls: type[Action] | None,
        observation_cls: type[Observation] | None,
        state_cls: type[State] | None,
        sample_actions: list[Any] | None,
        seed: int,
        steps: int,
    ) -> None:
        self.source = source
        self.instance_given = isinstance(source, Environment)
        self.env_cls = type(source) if self.instance_given else factory_class(source)
        name = type(source).__name__ if self.instance_given else factory_name(source)
        self.report = CheckReport(target=name, kind="env")
        self.given_action_cls = action_cls
        self.given_observation_cls = observation_cls
        self.given_state_cls = state_cls
        self.given_samples = sample_actions
        self.seed = seed
        self.steps = max(1, steps)
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="openenv-check")
        self.instances: list[_Instance] = []
        self.action_cls: type[Action] | None = None
        self.observation_cls: type[Observation] = Observation
        self.state_cls: type[State] = State
        self.mcp = False
        self.infer_observation = False
        self.actions: list[Action] = []
        self.action_payloads: list[dict[str, Any]] = []
        self.sample_source = ""
        self._tools: list[dict[str, Any]] = []

    # -- plumbing ------------------------------------------------------------------------

    async def _new_instance(self) -> _Instance:
        if self.instance_given:
            if self.instances:
                raise RuntimeError("an Environment instance was given, not a class or factory")
            env = self.source
        else:
            loop = asyncio.get_running_loop()
            env = await loop.run_in_executor(self.executor, self.source)
        inst = _Instance(env, self.executor)
        self.instances.append(inst)
        if isinstance(env, Environment):
            await inst.enter()
        return inst

    async def _state_snapshot(self, inst: _Instance, run: _Run | None = None) -> Any:
        try:
            st = await inst.state()
        except Exception as exc:
            if run is not None and run.state_error is None:
                run.state_error = exc
            return f"<state raised {type(exc).__name__}>"
        if run is not None:
            try:
                run.state_objects.append(st.model_copy(deep=True))
            except Exception:
                run.state_objects.append(st)
        return without(normalize(st), "episode_id")

    async def _episode(self, inst: _Instance, actions: list[Any]) -> _Run:
        run = _Run()
        try:
            run.reset_obs = await inst.reset(seed=self.seed)
        except Exception as exc:
            run.reset_error = exc
            return run
        run.states.append(await self._state_snapshot(inst, run))
        for i, action in enumerate(actions):
            try:
                obs = await inst.step(action)
            except Exception as exc:
                run.step_error = (i, exc)
                break
            run.observations.append(obs)
            run.states.append(await self._state_snapshot(inst, run))
            if _done(obs):
                run.done_at = i
                break
        return run

    def _obs_problem(self, obs: Any, method: str) -> str | None:
        declared = self.observation_cls.__name__
        if not isinstance(obs, Observation):
            return (
                f"{method}() returned {type(obs).__name__} ({short(obs, 60)}), expected an "
                f"Observation ({declared}); served, this call fails with EXECUTION_ERROR"
            )
        if self.mcp:
            from openenv.core.env_server.mcp_types import (
                CallToolObservation,
                ListToolsObservation,
            )

            if method == "reset" or isinstance(
                obs, (self.observation_cls, CallToolObservation, ListToolsObservation)
            ):
                return None
        if not isinstance(obs, self.observation_cls):
            return (
                f"{method}() returned {type(obs).__name__}, which is not a {declared} (the "
                f"declared observation type, which typed clients parse observations into)"
            )
        return None

    # -- the checks --------------------------------------------------------------------------

    async def run(self) -> CheckReport:
        try:
            await self._run()
        finally:
            for inst in self.instances:
                if not self.instance_given:
                    with contextlib.suppress(Exception):
                        await inst.close()
            self.executor.shutdown(wait=False)
        return self.report

    async def _run(self) -> None:
        report = self.report
        try:
            env_a = await self._new_instance()
        except Exception as exc:
            report.failed("construct", f"building the environment raised {_exc(exc)}")
            return
        if not isinstance(env_a.env, Environment):
            report.failed(
                "construct",
                f"the factory returned {type(env_a.env).__name__}, not an "
                "openenv.core.env_server.Environment",
            )
            return
        report.passed("construct", f"built {type(env_a.env).__name__}")
        self.env_cls = type(env_a.env)
        self.mcp = _is_mcp(env_a.env)

        self._check_types()

        # reset / state on the first instance
        try:
            reset_obs = await env_a.reset(seed=self.seed)
        except Exception as exc:
            report.failed("reset", f"reset(seed={self.seed}) raised {_exc(exc)}")
            reset_obs = None
        else:
            inferred = ""
            if self.infer_observation and isinstance(reset_obs, Observation):
                self.observation_cls = type(reset_obs)
                inferred = " (taken as the observation type: none was declared)"
            problem = self._obs_problem(reset_obs, "reset")
            if problem:
                report.failed("reset", problem)
            else:
                env = env_a.env
                method = env.reset_async if overrides(type(env), "reset_async") else env.reset
                note = ""
                if "seed" not in filter_kwargs(method, {"seed": self.seed}):
                    note = "; note: reset() takes no seed, so episodes cannot be reproduced"
                report.passed(
                    "reset",
                    f"reset(seed={self.seed}) returned {type(reset_obs).__name__}{inferred}{note}",
                )
        await self.report.guard("schema_roundtrip", self._check_schemas)
        await self.report.guard("state", self._check_state, env_a)
        if self.mcp:
            await self.report.guard("mcp_tools", self._check_mcp_tools, env_a)
        await self.report.guard("sample_actions", self._make_samples)

        if reset_obs is None or not self.actions:
            for name in ("step", "determinism", "step_after_done"):
                report.skipped(name, "no reset observation or no valid sample actions")
            run1 = run2 = None
        else:
            actions = self.actions[: self.steps]
            run1 = await self._episode(env_a, actions)
            run2 = await self._episode(env_a, actions)
            await self.report.guard("step", self._check_steps, run1, len(actions))
            await self.report.guard("determinism", self._check_determinism, run1, run2)
            await self.report.guard(
                "step_after_done", self._check_step_after_done, env_a, run1, run2
            )

        observations: list[Any] = []
        states: list[Any] = []
        if run1 is not None:
            observations = [run1.reset_obs, *run1.observations]
            states = run1.state_objects
        elif reset_obs is not None:
            observations = [reset_obs]
        await self.report.guard(
            "observation_roundtrip", self._check_observation_roundtrip, observations
        )
        await self.report.guard("observation_schema", self._check_observation_schema, observations)
        await self.report.guard("action_roundtrip", self._check_action_roundtrip)
        await self.report.guard("state_roundtrip", self._check_state_roundtrip, states)
        await self.report.guard("invalid_action", self._check_invalid_actions)
        await self.report.guard("isolation", self._check_isolation, env_a)
        await self.report.guard("close", self._check_close)

    # -- individual checks ----------------------------------------------------------------------

    def _check_types(self) -> None:
        decl_action, decl_obs, decl_state = declared_types(self.env_cls)
        problems = []
        action_cls = self.given_action_cls or decl_action
        if action_cls is None and self.given_samples:
            first = self.given_samples[0]
            if isinstance(first, Action):
                action_cls = type(first)
        if action_cls is None and self.mcp:
            from openenv.core.env_server.mcp_types import CallToolAction

            action_cls = CallToolAction
        obs_cls = self.given_observation_cls or decl_obs
        if obs_cls is None and self.mcp:
            from openenv.core.env_server.mcp_types import CallToolObservation

            obs_cls = CallToolObservation
        self.infer_observation = obs_cls is None
        state_cls = self.given_state_cls or decl_state or State
        for label, cls, base in (
            ("action", action_cls, Action),
            ("observation", obs_cls, Observation),
            ("state", state_cls, State),
        ):
            if cls is not None and not (isinstance(cls, type) and issubclass(cls, base)):
                problems.append(f"the {label} class {cls!r} is not a subclass of {base.__name__}")
        if action_cls is None:
            problems.append(
                "cannot tell the action class: pass action_cls or declare "
                "Environment[MyAction, MyObservation, MyState]"
            )
        if problems:
            self.report.failed("types", "; ".join(problems))
            if action_cls is not None and not (
                isinstance(action_cls, type) and issubclass(action_cls, Action)
            ):
                action_cls = None
            obs_cls = (
                obs_cls if isinstance(obs_cls, type) and issubclass(obs_cls, Observation) else None
            )
            state_cls = (
                state_cls if isinstance(state_cls, type) and issubclass(state_cls, State) else State
            )
        self.action_cls = action_cls
        self.observation_cls = obs_cls or Observation
        self.state_cls = state_cls
        if not problems:
            undeclared = "" if obs_cls else " (no observation type declared: inferred from reset())"
            self.report.passed(
                "types",
                f"action {action_cls.__name__}, observation {self.observation_cls.__name__}, "
                f"state {state_cls.__name__}{undeclared}",
            )

    def _check_schemas(self) -> None:
        problems = []
        checked = []
        for label, cls in (
            ("action", self.action_cls),
            ("observation", self.observation_cls),
            ("state", self.state_cls),
        ):
            if cls is None:
                continue
            try:
                schema = cls.model_json_schema()
            except Exception as exc:
                problems.append(
                    f"{label} {cls.__name__}.model_json_schema() raised {_exc(exc)} (GET /schema "
                    "would fail)"
                )
                continue
            try:
                back = json.loads(json.dumps(schema, allow_nan=False))
            except (TypeError, ValueError) as exc:
                problems.append(f"{label} schema of {cls.__name__} is not valid JSON: {exc}")
                continue
            if back != schema:
                problems.append(f"{label} schema of {cls.__name__} changes in a JSON round trip")
            for err in check_schema(schema):
                problems.append(
                    f"{label} schema of {cls.__name__} is not a valid JSON Schema: {err}"
                )
            checked.append(label)
        if problems:
            self.report.failed("schema_roundtrip", "; ".join(problems))
        else:
            self.report.passed(
                "schema_roundtrip",
                f"{', '.join(checked)} JSON schemas survive a JSON round trip and are valid "
                f"JSON Schema ({schema_validator_name()})",
            )

    async def _check_state(self, inst: _Instance) -> None:
        try:
            st = await inst.state()
        except Exception as exc:
            self.report.failed("state", f"reading state raised {_exc(exc)}")
            return
        if not isinstance(st, State):
            self.report.failed(
                "state", f"state returned {type(st).__name__} ({short(st, 60)}), expected a State"
            )
        elif not isinstance(st, self.state_cls):
            self.report.failed(
                "state",
                f"state returned {type(st).__name__}, not the declared {self.state_cls.__name__} "
                "(GET /schema publishes the declared class)",
            )
        else:
            self.report.passed("state", f"state is a {type(st).__name__}")

    async def _check_mcp_tools(self, inst: _Instance) -> None:
        try:
            tools = await inst.env.list_tools()
        except Exception as exc:
            self.report.failed("mcp_tools", f"list_tools() raised {_exc(exc)}")
            return
        names = [t.name for t in tools]
        problems = []
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            problems.append(f"duplicate tool names {dupes}")
        for tool in tools:
            for err in check_schema(tool.input_schema):
                problems.append(f"tool {tool.name!r} input schema: {err}")
        if problems:
            self.report.failed("mcp_tools", "; ".join(problems))
        else:
            self.report.passed("mcp_tools", f"{len(tools)} tools: {', '.join(names)}")
        self._tools = [{"name": t.name, "input_schema": t.input_schema} for t in tools]

    def _accepted_action_types(self) -> tuple[type, ...]:
        if self.action_cls is None:
            return (Action,)
        if self.mcp:
            from openenv.core.env_server.mcp_types import CallToolAction, ListToolsAction

            return (self.action_cls, CallToolAction, ListToolsAction)
        return (self.action_cls,)

    async def _make_samples(self) -> None:
        report = self.report
        if self.action_cls is None and not self.given_samples:
            report.skipped("sample_actions", "the action class is unknown")
            return
        payloads: list[Any]
        if self.given_samples is not None:
            payloads = list(self.given_samples)
            self.sample_source = "given"
        else:
            try:
                if self.mcp:
                    payloads = tool_call_samples(self._tools, self.steps)
                    self.sample_source = "generated from the tools' input schemas"
                else:
                    schema = self.action_cls.model_json_schema()  # type: ignore[union-attr]
                    payloads = sample_actions_from_schema(schema, self.steps)
                    self.sample_source = "generated from the action schema"
            except Exception as exc:  # SampleGenerationError or a schema that cannot be built
                report.failed(
                    "sample_actions",
                    f"could not generate actions from the schema ({_exc(exc)}); pass "
                    "sample_actions=[...]",
                )
                return
        if not payloads:
            report.failed("sample_actions", "sample_actions is empty")
            return
        problems = []
        for i, item in enumerate(payloads):
            if isinstance(item, BaseModel):
                action = item
                if not isinstance(item, self._accepted_action_types()):
                    expected = self.action_cls.__name__ if self.action_cls else "Action"
                    problems.append(f"#{i}: {type(item).__name__} is not a {expected}")
                    continue
                payload = item.model_dump(mode="json")
            elif isinstance(item, dict):
                payload = item
                try:
                    action = deserialize_action(item, self.action_cls or Action)
                except ValidationError as exc:
                    problems.append(f"#{i} {short(item, 60)}: {_validation_summary(exc)}")
                    continue
                except Exception as exc:
                    problems.append(f"#{i} {short(item, 60)}: {_exc(exc)}")
                    continue
            else:
                problems.append(f"#{i}: expected an Action or a dict, got {type(item).__name__}")
                continue
            self.actions.append(action)  # type: ignore[arg-type]
            self.action_payloads.append(payload)
        if problems:
            hint = "" if self.sample_source == "given" else "; pass sample_actions=[...] explicitly"
            report.failed(
                "sample_actions",
                f"{len(problems)} of {len(payloads)} {self.sample_source} actions are invalid: "
                + "; ".join(problems[:3])
                + hint,
            )
            self.actions = []
            self.action_payloads = []
            return
        first = short(self.action_payloads[0], 100)
        report.passed(
            "sample_actions", f"{len(self.actions)} actions {self.sample_source}, e.g. {first}"
        )
        # Episodes take `steps` actions, cycling through the samples.
        count = len(self.actions)
        if count < self.steps:
            self.actions = [self.actions[i % count] for i in range(self.steps)]
            self.action_payloads = [self.action_payloads[i % count] for i in range(self.steps)]

    def _check_steps(self, run: _Run, planned: int) -> None:
        report = self.report
        if run.reset_error is not None:
            report.failed("step", f"reset(seed={self.seed}) raised {_exc(run.reset_error)}")
            return
        problems = []
        for i, obs in enumerate(run.observations):
            problem = self._obs_problem(obs, "step")
            if problem:
                problems.append(f"step #{i}: {problem}")
                break
        if run.step_error is not None:
            i, exc = run.step_error
            problems.append(
                f"step #{i} with {short(self.action_payloads[i], 80)} raised {_exc(exc)} "
                f"(served: EXECUTION_ERROR); if the sample actions ({self.sample_source}) make "
                "no sense for this environment, pass sample_actions=[...]"
            )
        if problems:
            report.failed("step", "; ".join(problems))
            return
        taken = len(run.observations)
        ended = f", done after {taken}" if run.done_at is not None else ""
        kinds = sorted({type(o).__name__ for o in run.observations})
        report.passed("step", f"{taken} of {planned} steps returned {', '.join(kinds)}{ended}")

    def _check_determinism(self, run1: _Run, run2: _Run) -> None:
        report = self.report
        if run1.reset_error is not None or run2.reset_error is not None:
            report.skipped("determinism", "reset raised")
            return
        taken = max(len(run1.observations), len(run2.observations))
        where = (
            f"reset(seed={self.seed}) twice on one instance, each followed by the same actions "
            f"({taken} steps)"
        )
        diffs: list[str] = []
        diff = first_difference(normalize(run1.reset_obs), normalize(run2.reset_obs))
        if diff:
            diffs.append(f"the reset observations differ at {diff}")
        else:
            for i, (a, b) in enumerate(zip(run1.observations, run2.observations, strict=False)):
                diff = first_difference(normalize(a), normalize(b))
                if diff:
                    diffs.append(f"the observations of step #{i} differ at {diff}")
                    break
        if not diffs and len(run1.observations) != len(run2.observations):
            diffs.append(
                f"the first episode took {len(run1.observations)} steps, the second "
                f"{len(run2.observations)}"
            )
        e1 = run1.step_error
        e2 = run2.step_error
        if not diffs and (e1 is None) != (e2 is None):
            which = "first" if e1 is not None else "second"
            i, exc = e1 or e2  # type: ignore[misc]
            diffs.append(f"step #{i} raised {_exc(exc)} only in the {which} episode")
        if diffs:
            report.failed(
                "determinism",
                f"NOT DETERMINISTIC: {where}: {diffs[0]}. Derive every random choice from the "
                "seed (e.g. self._rng = random.Random(seed) in reset), not from global random "
                "state, the clock or uuid4.",
            )
            return
        state_diff = None
        for i, (a, b) in enumerate(zip(run1.states, run2.states, strict=False)):
            diff = first_difference(a, b)
            if diff:
                label = "after reset" if i == 0 else f"after step #{i - 1}"
                state_diff = f"the states {label} differ at {diff}"
                break
        if state_diff:
            report.failed(
                "determinism",
                f"observations are deterministic but the state is not ({where}; episode_id "
                f"ignored): {state_diff}",
                severity="warning",
            )
            return
        report.passed(
            "determinism",
            f"{where} gave identical observations and states (episode_id ignored)",
        )

    async def _check_step_after_done(self, inst: _Instance, run1: _Run, run2: _Run) -> None:
        report = self.report
        if run1.done_at is None:
            report.skipped(
                "step_after_done",
                f"no episode ended within {len(self.actions[: self.steps])} steps; raise "
                "steps= or pass sample_actions that finish an episode to check it",
            )
            return
        if run2.done_at is None:
            report.skipped("step_after_done", "the second episode did not end (not deterministic)")
            return
        action = self.actions[(run2.done_at + 1) % len(self.actions)]
        try:
            obs = await inst.step(action)
        except Exception as exc:
            if str(exc).strip():
                report.passed(
                    "step_after_done",
                    f"a step after done raises {_exc(exc)} (a clear error; served, the client "
                    "gets EXECUTION_ERROR)",
                )
            else:
                report.failed(
                    "step_after_done",
                    f"a step after done raises {type(exc).__name__} without a message; say that "
                    "the episode is over and reset() is needed",
                    severity="warning",
                )
            return
        if not isinstance(obs, Observation):
            report.failed(
                "step_after_done",
                f"a step after done returned {type(obs).__name__}, not an Observation",
            )
        elif obs.done:
            report.passed(
                "step_after_done",
                "a step after done returns another done observation (done=True); document "
                "that behaviour",
            )
        else:
            report.failed(
                "step_after_done",
                "a step after done returned done=False: the finished episode silently continues; "
                "raise an error (e.g. 'episode is over, call reset()') or keep returning done=True",
                severity="warning",
            )

    def _check_observation_roundtrip(self, observations: list[Any]) -> None:
        report = self.report
        models = [o for o in observations if isinstance(o, Observation)]
        if not models:
            report.skipped("observation_roundtrip", "no Observation to check")
            return
        problems: list[str] = []
        for obs in models:
            problem = _observation_roundtrip(obs)
            if problem and problem not in problems:
                problems.append(problem)
        if problems:
            report.failed("observation_roundtrip", "; ".join(problems[:3]))
        else:
            kinds = sorted({type(o).__name__ for o in models})
            report.passed(
                "observation_roundtrip",
                f"{len(models)} observations ({', '.join(kinds)}) survive serialize_observation "
                "-> JSON -> parse back unchanged",
            )

    def _check_observation_schema(self, observations: list[Any]) -> None:
        report = self.report
        try:
            schema = self.observation_cls.model_json_schema()
        except Exception:
            report.skipped("observation_schema", "the observation schema could not be built")
            return
        problems: list[str] = []
        checked = 0
        exempt = 0
        for index, obs in enumerate(observations):
            if not isinstance(obs, Observation):
                continue
            if self.mcp and (index == 0 or not isinstance(obs, self.observation_cls)):
                exempt += 1  # MCP environments reset (and list tools) with their own types
                continue
            try:
                wire = _wire_observation(loads(dumps(serialize_observation(obs))))
            except (TypeError, orjson.JSONEncodeError):
                continue  # reported by observation_roundtrip
            checked += 1
            errors = validate(wire, schema)
            if errors:
                problems.append(
                    f"{type(obs).__name__} does not match the {self.observation_cls.__name__} "
                    f"schema: {'; '.join(errors[:3])}"
                )
                continue
            try:
                self.observation_cls.model_validate(wire)
            except ValidationError as exc:
                problems.append(
                    f"{type(obs).__name__} does not parse as {self.observation_cls.__name__}: "
                    f"{_validation_summary(exc)}"
                )
        if problems:
            report.failed("observation_schema", "; ".join(dict.fromkeys(problems)))
        elif not checked:
            report.skipped("observation_schema", "no serializable observation of the declared type")
        else:
            note = f" ({exempt} MCP reset/list observations exempt)" if exempt else ""
            report.passed(
                "observation_schema",
                f"{checked} wire observations match the published "
                f"{self.observation_cls.__name__} schema ({schema_validator_name()}){note}",
            )

    def _check_action_roundtrip(self) -> None:
        report = self.report
        if not self.actions:
            report.skipped("action_roundtrip", "no valid sample actions")
            return
        problems = []
        for action in self.actions:
            try:
                data = action.model_dump(mode="json")
                back = loads(dumps(data))
                parsed = deserialize_action(back, self.action_cls or type(action))
            except Exception as exc:
                problems.append(f"{short(action, 60)}: {_exc(exc)}")
                continue
            if type(parsed) is not type(action):
                problems.append(f"{type(action).__name__} parses back as {type(parsed).__name__}")
                continue
            diff = first_difference(normalize(action), normalize(parsed))
            if diff:
                problems.append(f"{type(action).__name__} changes in a JSON round trip: {diff}")
        if problems:
            report.failed("action_roundtrip", "; ".join(problems[:3]))
        else:
            report.passed(
                "action_roundtrip",
                f"{len(self.actions)} actions survive model_dump -> JSON -> model_validate",
            )

    def _check_state_roundtrip(self, states: list[Any]) -> None:
        report = self.report
        models = [s for s in states if isinstance(s, State)]
        if not models:
            report.skipped("state_roundtrip", "no State to check")
            return
        problems: list[str] = []
        for st in models:
            try:
                raw = dumps(st.model_dump())
            except (TypeError, orjson.JSONEncodeError) as exc:
                bad = unserializable_fields(st)
                problems.append(
                    f"{type(st).__name__} is not JSON serializable: "
                    f"{', '.join(bad) if bad else exc} (GET /state would fail)"
                )
                continue
            try:
                parsed = type(st).model_validate(loads(raw))
            except ValidationError as exc:
                problems.append(
                    f"{type(st).__name__} does not parse back from its JSON: "
                    f"{_validation_summary(exc)}"
                )
                continue
            diff = first_difference(normalize(st), normalize(parsed))
            if diff:
                problems.append(f"{type(st).__name__} changes in a JSON round trip: {diff}")
        if problems:
            report.failed("state_roundtrip", "; ".join(dict.fromkeys(problems)))
        else:
            report.passed(
                "state_roundtrip", f"{len(models)} states survive model_dump -> JSON -> parse back"
            )

    def _check_invalid_actions(self) -> None:
        report = self.report
        names = (
            "invalid_action_unknown_field",
            "invalid_action_wrong_type",
            "invalid_action_missing_field",
        )
        if self.action_cls is None or not self.action_payloads:
            for name in names:
                report.skipped(name, "no action class or no valid sample action to start from")
            return
        action_cls = self.action_cls
        try:
            schema = action_cls.model_json_schema()
        except Exception:
            schema = {}
        base = dict(self.action_payloads[0])
        base.pop("metadata", None)

        def probe(name: str, field_name: str, payload: dict[str, Any], what: str) -> None:
            try:
                accepted = deserialize_action(payload, action_cls)
            except ValidationError as exc:
                locs = [
                    ".".join(str(p) for p in err.get("loc", ()))
                    for err in exc.errors(include_url=False)
                ]
                if any(loc.split(".")[0] == field_name for loc in locs):
                    report.passed(name, f"{what} is rejected: {_validation_summary(exc)}")
                else:
                    report.failed(
                        name,
                        f"{what} is rejected, but the error does not name the field "
                        f"{field_name!r}: {_validation_summary(exc)}",
                    )
                return
            except Exception as exc:
                report.failed(
                    name,
                    f"{what} raises {_exc(exc)} instead of a pydantic ValidationError (served: "
                    "not reported as VALIDATION_ERROR); raise ValueError in validators",
                )
                return
            report.failed(
                name,
                f"{what} is ACCEPTED by {action_cls.__name__} (parsed as {short(accepted, 80)}); "
                + _accept_hint(name, action_cls),
            )

        probe(
            names[0],
            UNKNOWN_FIELD,
            {**base, UNKNOWN_FIELD: 1},
            f"an action with the unknown field {UNKNOWN_FIELD!r}",
        )
        wrong = wrong_type_probe(schema, base)
        if wrong is None:
            report.skipped(names[1], f"{action_cls.__name__} has no typed field to violate")
        else:
            field_name, bad, payload = wrong
            probe(names[1], field_name, payload, f"{field_name}={short(bad, 50)} (wrong type)")
        missing = missing_field_probe(schema, base)
        if missing is None:
            report.skipped(names[2], f"{action_cls.__name__} has no required field")
        else:
            field_name, payload = missing
            probe(names[2], field_name, payload, f"an action without required field {field_name!r}")

    async def _check_isolation(self, env_a: _Instance) -> None:
        report = self.report
        if self.instance_given:
            report.skipped("isolation", "an instance was given: pass the class or a factory")
            return
        concurrent = bool(getattr(self.env_cls, "SUPPORTS_CONCURRENT_SESSIONS", False))
        severity = "error" if concurrent else "warning"
        try:
            env_b = await self._new_instance()
        except Exception as exc:
            report.failed("isolation", f"building a second instance raised {_exc(exc)}")
            return
        if env_b.env is env_a.env:
            report.failed(
                "isolation", "the factory returned the same instance twice", severity=severity
            )
            return
        try:
            await env_a.reset(seed=self.seed)
            await env_b.reset(seed=self.seed)
            state_a = await env_a.state()
            state_b = await env_b.state()
            before = normalize(state_b)
        except Exception as exc:
            report.skipped("isolation", f"resetting two instances raised {_exc(exc)}")
            return
        why = (
            ""
            if concurrent
            else " (SUPPORTS_CONCURRENT_SESSIONS is False, so the server runs "
            "one session at a time, but /metadata and stateless HTTP calls still build extra "
            "instances)"
        )
        if state_a is state_b:
            report.failed(
                "isolation",
                f"two instances return the very same {type(state_a).__name__} object from "
                f"`state`: it is shared (a class-level attribute?){why}",
                severity=severity,
            )
            return
        stepped = 0
        for action in self.actions[:_ISOLATION_STEPS]:
            try:
                obs = await env_a.step(action)
            except Exception:
                break
            stepped += 1
            if _done(obs):
                break
        try:
            after = normalize(await env_b.state())
        except Exception as exc:
            report.failed("isolation", f"reading the second instance's state raised {_exc(exc)}")
            return
        diff = first_difference(before, after)
        if diff:
            report.failed(
                "isolation",
                f"stepping one instance {stepped} times changed ANOTHER instance's state "
                f"(before != after): {diff}. "
                "The instances share state (class-level mutable attributes, module globals, or "
                f"one object handed out by the factory){why}",
                severity=severity,
            )
        else:
            report.passed(
                "isolation",
                f"stepping one instance {stepped} times left a second instance's state unchanged",
            )

    async def _check_close(self) -> None:
        report = self.report
        if self.instance_given:
            report.skipped("close", "an instance was given; the checker does not close it")
            return
        problems = []
        try:
            fresh = await self._new_instance()
        except Exception as exc:
            problems.append(f"building an instance to close raised {_exc(exc)}")
            fresh = None
        for inst in self.instances:
            label = "an instance never reset" if inst is fresh else "a used instance"
            try:
                await inst.close()
            except Exception as exc:
                problems.append(f"close() of {label} raised {_exc(exc)}")
        if problems:
            report.failed("close", "; ".join(problems))
        else:
            report.passed(
                "close", f"close() works on {len(self.instances)} instances (one never reset)"
            )


def _validation_summary(exc: ValidationError, limit: int = 3) -> str:
    parts = []
    for err in exc.errors(include_url=False)[:limit]:
        loc = ".".join(str(p) for p in err.get("loc", ())) or "(root)"
        parts.append(f"{loc}: {err.get('msg')}")
    return "; ".join(parts)


def _accept_hint(check: str, action_cls: type) -> str:
    if check == "invalid_action_unknown_field":
        return (
            "a misspelled field would be silently ignored; keep extra='forbid' (the Action "
            "base class sets it)"
        )
    if check == "invalid_action_wrong_type":
        return "give the field a concrete type instead of Any / a permissive validator"
    return "make the field required only if it really is, or give it a default"


def _wire_observation(payload: dict[str, Any]) -> dict[str, Any]:
    """The observation a client rebuilds from a reset/step reply."""
    obs = dict(payload.get("observation") or {})
    obs["reward"] = payload.get("reward")
    obs["done"] = payload.get("done", False)
    if "metadata" in payload or "metadata" in obs:
        obs["metadata"] = payload.get("metadata") or obs.get("metadata") or {}
    return obs


def _observation_roundtrip(obs: Observation) -> str | None:
    name = type(obs).__name__
    try:
        payload = serialize_observation(obs)
        raw = dumps(payload)
    except (TypeError, orjson.JSONEncodeError) as exc:
        bad = unserializable_fields(obs)
        fields = f"field {', '.join(bad)}" if bad else str(exc)
        return f"{name} is not JSON serializable: {fields} (served, the reply fails)"
    except Exception as exc:
        return f"serializing {name} raised {_exc(exc)}"
    try:
        parsed = type(obs).model_validate(_wire_observation(loads(raw)))
    except ValidationError as exc:
        return f"{name} does not parse back from its JSON: {_validation_summary(exc)}"
    diff = first_difference(normalize(obs), normalize(parsed))
    if diff:
        return f"{name} changes in a JSON round trip: {diff}"
    return None


async def acheck_env(
    env: EnvSource,
    action_cls: type[Action] | None = None,
    observation_cls: type[Observation] | None = None,
    *,
    state_cls: type[State] | None = None,
    sample_actions: list[Any] | None = None,
    seed: int = 0,
    steps: int = DEFAULT_STEPS,
    raise_on_failure: bool = True,
) -> CheckReport:
    """`check_env` for callers already inside an event loop."""
    checker = _EnvChecker(env, action_cls, observation_cls, state_cls, sample_actions, seed, steps)
    report = await checker.run()
    if raise_on_failure:
        report.raise_for_failures()
    return report


def check_env(
    env: EnvSource,
    action_cls: type[Action] | None = None,
    observation_cls: type[Observation] | None = None,
    *,
    state_cls: type[State] | None = None,
    sample_actions: list[Any] | None = None,
    seed: int = 0,
    steps: int = DEFAULT_STEPS,
    raise_on_failure: bool = True,
) -> CheckReport:
    """Check an environment in-process, like Gymnasium's `check_env`.

    `env` is an `Environment` subclass or a factory (called once per instance it needs; an
    instance is accepted too, but then isolation and close are not checked). The action,
    observation and state classes default to the ones the class declares
    (`Environment[MyAction, MyObservation, MyState]` or annotations); MCP environments use
    `CallToolAction`.

    `sample_actions` (Action instances or wire dicts) drive the episodes; by default they are
    generated from the action schema (see `openenv.testing.samples`) or, for MCP environments,
    from the tools' input schemas. Each episode is `reset(seed=seed)` followed by at most `steps`
    actions, ending early at `done`.

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
