"""The checks, each written once, run through a driver (`drivers.py`).

A driver opens sessions (an environment instance in-process, a `/ws` connection against a URL)
that speak the wire format: `reset` and `step` answer the flat observation a client rebuilds,
`state` the state dict, and a refusal raises `WireError` with the server's error code. What
only one driver can see (types and round trips of Python objects in-process; endpoints and
the HTTP transport over a URL) the driver checks itself, before and after the shared checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Protocol

from pydantic import BaseModel

from openenv.core.errors import exception_message as _exc
from openenv.core.protocol import WSErrorCode

from ._jsonutil import check_schema, first_difference, normalize, short, validate, without
from .report import CheckReport, Severity
from .samples import (
    UNKNOWN_FIELD,
    declared_samples,
    missing_field_probe,
    sample_actions_from_schema,
    tool_call_samples,
    wrong_type_probe,
)

#: Default number of actions per checked episode (it stops earlier when `done`).
DEFAULT_STEPS = 10
_ISOLATION_STEPS = 3
_INVALID = ("invalid_action_unknown_field", "invalid_action_wrong_type")
INVALID_CHECKS = (*_INVALID, "invalid_action_missing_field")

#: What each check verifies (the table shows it for passing checks; `--json` `description`).
DESCRIPTIONS = {
    # in-process only
    "construct": "the environment can be built",
    "types": "the action, observation and state classes are known Action/Observation/State",
    "observation_roundtrip": "observations survive JSON and parse back into their class",
    "action_roundtrip": "sample actions survive model_dump -> JSON -> model_validate",
    "state_roundtrip": "states survive JSON and parse back into their class",
    "close": "close() works on used and never-reset instances",
    # over a URL only
    "health_endpoint": "GET /health answers 200 with status healthy",
    "openapi_version_available": "GET /openapi.json has a 1.x info.version (the protocol)",
    "mode_endpoint_consistency": (
        "simulation mode serves /reset, /step and /state over HTTP; production mode none"
    ),
    "mcp_endpoint": "POST /mcp answers JSON-RPC 2.0",
    "http_session": "an HTTP session (X-OpenEnv-Session-Id) runs a full episode and closes",
    "transport_consistency": "the same seeded episode is identical over /ws and HTTP",
    "http_stateless": "POST /reset without a session answers, as in OpenEnv",
    "sessions_released": "every session the checker opened was released",
    # shared
    "metadata_endpoint": "the metadata (GET /metadata) has a string name and description",
    "schema_endpoint": "the action, observation and state schemas (GET /schema) are JSON Schemas",
    "mcp_tools": "MCP tools have unique names and valid input schemas (MCP environments)",
    "sample_actions": "sample actions (given, declared or generated) match the action schema",
    "reset": "reset(seed) answers an observation",
    "state": "state answers a State with an integer step_count",
    "step": "step(action) answers every sample action",
    "determinism": "the same seed and actions give the same episode",
    "step_after_done": "a step after done is refused or stays done",
    "invalid_action_unknown_field": "an action with an unknown field is refused, naming it",
    "invalid_action_wrong_type": "an action with a wrongly typed field is refused, naming it",
    "invalid_action_missing_field": "an action without a required field is refused, naming it",
    "observation_schema": "observations match the published observation schema",
    "state_schema": "states match the published state schema",
    "isolation": "stepping one session leaves another session's state unchanged",
}


class WireError(Exception):
    """What a client would receive as an error frame: `code` and a message."""

    def __init__(
        self, message: str, code: str = WSErrorCode.EXECUTION_ERROR.value, data: Any = None
    ) -> None:
        self.message = message
        self.code = code
        self.data = data if isinstance(data, dict) else {}
        super().__init__(f"{code}: {message}")


class Unavailable(Exception):
    """The driver cannot do this (e.g. a second session of a given instance); says why."""


class Session(Protocol):
    async def reset(self, seed: int) -> dict[str, Any]: ...
    async def step(self, action: dict[str, Any]) -> dict[str, Any]: ...
    async def state(self) -> dict[str, Any]: ...
    async def close(self) -> None: ...


class Driver(Protocol):
    """What the shared checks need from an environment, however it is reached."""

    async def preflight(self, checker: Checker) -> bool: ...
    async def metadata(self) -> dict[str, Any]: ...
    async def schemas(self) -> dict[str, Any]: ...
    async def tools(self) -> Optional[list[dict[str, Any]]]: ...
    async def open(self) -> Session: ...
    def isolation(self) -> tuple[Optional[Severity], str]: ...
    async def refusals(self, payload: dict[str, Any], field_name: str) -> list[str]: ...
    async def postflight(self, checker: Checker, run: Episode) -> None: ...
    async def aclose(self) -> None: ...


@dataclass
class Episode:
    """One episode: reset(seed), then the actions until done, an error or the end."""

    label: str
    reset: Optional[dict[str, Any]] = None
    reset_error: Optional[WireError] = None
    observations: list[dict[str, Any]] = field(default_factory=list)
    #: states (without episode_id) after reset and after each step
    states: list[Any] = field(default_factory=list)
    state_error: Optional[WireError] = None
    step_error: Optional[tuple[int, WireError]] = None
    done_at: Optional[int] = None


def names_field(field_name: str, errors: Any, detail: Any = None) -> bool:
    """Whether pydantic-style `errors` (or a detail text) point at `field_name`."""
    for err in errors if isinstance(errors, list) else []:
        loc = err.get("loc") if isinstance(err, dict) else None
        # FastAPI prefixes body errors with ("body", "action"); ours start at the field.
        if isinstance(loc, (list, tuple)) and field_name in [str(p) for p in loc[:3]]:
            return True
    return isinstance(detail, str) and field_name in detail


class Checker:
    """Runs every shared check through `driver`, filling `report`."""

    def __init__(
        self,
        driver: Driver,
        report: CheckReport,
        sample_actions: Optional[list[Any]],
        seed: int,
        steps: int,
    ) -> None:
        self.driver = driver
        self.report = report
        self.given_samples = sample_actions
        self.seed = seed
        self.steps = max(1, steps)
        self.schemas: dict[str, Any] = {}
        self.tools: Optional[list[dict[str, Any]]] = None
        self.actions: list[dict[str, Any]] = []
        self.sample_source = ""
        #: every observation seen: (label, flat observation, is a reset observation)
        self.observations: list[tuple[str, dict[str, Any], bool]] = []
        self.states: list[tuple[str, Any]] = []

    @property
    def mcp(self) -> bool:
        return self.tools is not None

    def add(
        self, name: str, passed: bool, detail: str = "", severity: Severity = "error", **kw: Any
    ) -> None:
        self.report.add(name, passed, detail, severity, description=DESCRIPTIONS[name], **kw)

    def skip(self, name: str, reason: str, severity: Severity = "error") -> None:
        self.add(name, True, f"skipped: {reason}", severity, skipped=True)

    async def guard(self, name: str, work: Any, *args: Any) -> None:
        """Run one check; an unexpected error in the checker fails that check, not the run."""
        try:
            await work(*args)
        except Exception as exc:
            self.add(name, False, f"the check could not complete: {_exc(exc)}")

    # -- the run ----------------------------------------------------------------------------

    async def run(self) -> CheckReport:
        try:
            if await self.driver.preflight(self):
                await self._run()
        finally:
            await self.driver.aclose()
        return self.report

    async def _run(self) -> None:
        await self.guard("metadata_endpoint", self.check_metadata)
        await self.guard("schema_endpoint", self.check_schemas)
        await self.guard("mcp_tools", self.check_tools)
        await self.guard("sample_actions", self.make_samples)
        # Sessions stay open until the driver's postflight: closing them is checked there.
        session = await self.driver.open()
        run1 = await self.episode(session, "episode 1")
        self.check_reset_state_step(run1)
        if run1.reset_error is None and self.actions:
            run2 = await self.episode(session, "episode 2")
            await self.guard("determinism", self.check_determinism, run1, run2)
            await self.guard("step_after_done", self.check_step_after_done, session, run2)
        else:
            self.skip("determinism", "the first episode could not run")
            self.skip("step_after_done", "the first episode could not run")
        await self.check_invalid_actions(session)
        await self.guard("isolation", self.check_isolation, session)
        await self.guard("observation_schema", self.check_observation_schema)
        await self.guard("state_schema", self.check_state_schema)
        await self.driver.postflight(self, run1)

    async def episode(self, session: Session, label: str) -> Episode:
        run = Episode(label)
        try:
            run.reset = await session.reset(self.seed)
            self.observations.append((f"{label} reset", run.reset, True))
        except WireError as exc:
            run.reset_error = exc
        await self._state(session, run)
        if run.reset_error is not None:
            return run
        for i, action in enumerate(self.actions[: self.steps]):
            try:
                obs = await session.step(action)
            except WireError as exc:
                run.step_error = (i, exc)
                break
            run.observations.append(obs)
            self.observations.append((f"{label} step #{i}", obs, False))
            await self._state(session, run)
            if obs.get("done"):
                run.done_at = i
                break
        return run

    async def _state(self, session: Session, run: Episode) -> None:
        try:
            st = await session.state()
        except WireError as exc:
            run.state_error = run.state_error or exc
            run.states.append(f"<state failed: {exc.code}>")
            return
        run.states.append(without(normalize(st), "episode_id"))
        self.states.append((run.label, st))

    # -- metadata, schemas, tools, samples --------------------------------------------------

    async def check_metadata(self) -> None:
        meta = await self.driver.metadata()
        name, description = meta.get("name"), meta.get("description")
        actual = {"name": name, "description": description}
        if isinstance(name, str) and isinstance(description, str) and name:
            version = meta.get("version") or "(no version)"
            detail = f"{name} {version}: {short(description, 100)}"
            self.add("metadata_endpoint", True, detail, actual=actual)
        else:
            detail = f"name and description must be strings, got {short(meta, 200)}"
            self.add("metadata_endpoint", False, detail, actual=actual)

    async def check_schemas(self) -> None:
        body = await self.driver.schemas()
        problems = []
        for key in ("action", "observation", "state"):
            schema = body.get(key)
            if not isinstance(schema, dict):
                problems.append(f"{key!r} is missing or not an object")
                continue
            self.schemas[key] = schema
            problems += [
                f"the {key} schema is not a valid JSON Schema: {e}" for e in check_schema(schema)
            ]
        if problems:
            self.add("schema_endpoint", False, "; ".join(problems))
        else:
            titles = ", ".join(f"{k} {s.get('title', '?')}" for k, s in self.schemas.items())
            self.add("schema_endpoint", True, titles)

    async def check_tools(self) -> None:
        self.tools = await self.driver.tools()
        if self.tools is None:
            self.skip("mcp_tools", "not an MCP environment")
            return
        names = [t.get("name") for t in self.tools]
        dupes = sorted({str(n) for n in names if names.count(n) > 1})
        problems = [f"duplicate tool names {dupes}"] if dupes else []
        for tool in self.tools:
            schema = tool.get("inputSchema", tool.get("input_schema"))
            for err in check_schema(schema):
                problems.append(f"tool {tool.get('name')!r} input schema: {err}")
        if problems:
            self.add("mcp_tools", False, "; ".join(problems))
        else:
            self.add("mcp_tools", True, f"{len(names)} tools: {', '.join(map(str, names))}")

    async def make_samples(self) -> None:
        schema = self.schemas.get("action")
        if self.given_samples is not None:
            payloads = [_payload(item) for item in self.given_samples]
            self.sample_source = "given"
        elif schema is not None and declared_samples(schema):
            payloads = declared_samples(schema)
            self.sample_source = "declared (the action schema's examples)"
        elif self.mcp:
            payloads = tool_call_samples(self.tools or [], self.steps)
            self.sample_source = "generated from the tools' input schemas"
        elif schema is not None:
            try:
                payloads = sample_actions_from_schema(schema, self.steps)
            except ValueError as exc:
                detail = f"cannot generate actions from the action schema ({exc})"
                self.add("sample_actions", False, f"{detail}; {_DECLARE_HINT}")
                return
            self.sample_source = "generated from the action schema"
        else:
            self.skip("sample_actions", "no action schema")
            return
        if not payloads or not all(isinstance(p, dict) for p in payloads):
            self.add("sample_actions", False, "sample actions must be a non-empty list of dicts")
            return
        problems = []
        if schema is not None and not self.mcp:
            for i, payload in enumerate(payloads):
                errors = validate(payload, schema)
                if errors:
                    problems.append(f"#{i} {short(payload, 60)}: {'; '.join(errors[:2])}")
        if problems:
            hint = "" if self.sample_source == "given" else f"; {_DECLARE_HINT}"
            detail = f"{len(problems)} of {len(payloads)} {self.sample_source} actions do not "
            detail += "match the action schema: " + "; ".join(problems[:3]) + hint
            self.add("sample_actions", False, detail)
            return
        detail = f"{len(payloads)} actions {self.sample_source}, e.g. {short(payloads[0], 100)}"
        self.add("sample_actions", True, detail)
        # Episodes take `steps` actions, cycling through the samples.
        self.actions = [payloads[i % len(payloads)] for i in range(max(self.steps, len(payloads)))]

    # -- one episode ------------------------------------------------------------------------

    def check_reset_state_step(self, run: Episode) -> None:
        if run.reset_error is not None:
            self.add("reset", False, f"reset(seed={self.seed}) failed: {run.reset_error.message}")
        else:
            assert run.reset is not None
            done, reward = run.reset.get("done"), run.reset.get("reward")
            self.add("reset", True, f"reset(seed={self.seed}) -> done={done}, reward={reward!r}")
        if run.state_error is not None:
            self.add("state", False, run.state_error.message)
        elif not isinstance(run.states[-1], dict) or not isinstance(
            run.states[-1].get("step_count"), int
        ):
            self.add(
                "state", False, f"the state has no integer step_count: {short(run.states[-1])}"
            )
        else:
            count = run.states[-1]["step_count"]
            self.add("state", True, f"step_count={count} after the episode")
        if run.reset_error is not None or not self.actions:
            self.skip("step", "no reset observation or no valid sample actions")
        elif run.step_error is not None:
            i, exc = run.step_error
            hint = (
                ""
                if self.sample_source == "given"
                else f"; if it is not legal here, {_DECLARE_HINT}"
            )
            detail = f"step #{i} with {short(self.actions[i], 80)} failed: {exc}{hint}"
            self.add("step", False, detail)
        else:
            taken = len(run.observations)
            ended = f", done after {taken}" if run.done_at is not None else ""
            planned = len(self.actions[: self.steps])
            self.add("step", True, f"{taken} of {planned} steps answered{ended}")

    def volatile_fields(self) -> list[str]:
        """Observation fields the schema marks `"volatile": true` (e.g. a measured duration):
        left out of the determinism check, since no seed can fix them."""
        properties = (self.schemas.get("observation") or {}).get("properties") or {}
        return [
            name
            for name, spec in properties.items()
            if isinstance(spec, dict) and spec.get("volatile") is True
        ]

    async def check_determinism(self, run1: Episode, run2: Episode) -> None:
        if run2.reset_error is not None:
            self.add("determinism", False, f"the second reset failed: {run2.reset_error}")
            return
        taken = max(len(run1.observations), len(run2.observations))
        where = (
            f"reset(seed={self.seed}) twice in one session, each followed by the same actions "
            f"({taken} steps)"
        )
        problem = None
        pairs = [(run1.reset, run2.reset), *zip(run1.observations, run2.observations, strict=False)]
        volatile = self.volatile_fields()
        for i, (a, b) in enumerate(pairs):
            diff = first_difference(
                without(normalize(a), *volatile), without(normalize(b), *volatile)
            )
            if diff:
                label = "reset" if i == 0 else f"step #{i - 1}"
                problem = f"the {label} observations differ at {diff}"
                break
        if problem is None and len(run1.observations) != len(run2.observations):
            problem = (
                f"the first episode took {len(run1.observations)} steps, the second "
                f"{len(run2.observations)}"
            )
        if problem is None and (run1.step_error is None) != (run2.step_error is None):
            i, exc = run1.step_error or run2.step_error  # type: ignore[misc]
            which = "first" if run1.step_error else "second"
            problem = f"step #{i} failed only in the {which} episode: {exc}"
        if problem:
            self.add(
                "determinism",
                False,
                f"NOT DETERMINISTIC: {where}: {problem}. Derive every random choice from the "
                "seed (e.g. self._rng = random.Random(seed) in reset), not from global random "
                "state, the clock or uuid4.",
            )
            return
        for i, (a, b) in enumerate(zip(run1.states, run2.states, strict=False)):
            diff = first_difference(a, b)
            if diff:
                label = "after reset" if i == 0 else f"after step #{i - 1}"
                detail = f"observations are deterministic but the state is not ({where}; "
                detail += f"episode_id ignored): the states {label} differ at {diff}"
                self.add("determinism", False, detail, "warning")
                return
        self.add("determinism", True, f"{where} gave identical observations and states")

    async def check_step_after_done(self, session: Session, run: Episode) -> None:
        if run.done_at is None:
            self.skip(
                "step_after_done",
                f"no episode ended within {len(self.actions[: self.steps])} steps; raise "
                "steps= or use sample actions that finish an episode to check it",
            )
            return
        try:
            obs = await session.step(self.actions[(run.done_at + 1) % len(self.actions)])
        except WireError as exc:
            if exc.message.strip():
                detail = f"a step after done is refused with {exc.code}: {short(exc.message, 120)}"
                self.add("step_after_done", True, detail)
            else:
                detail = f"a step after done fails with {exc.code} and no message; say that "
                detail += "the episode is over and reset() is needed"
                self.add("step_after_done", False, detail, "warning")
            return
        if obs.get("done"):
            detail = "a step after done returns another done observation (done=True)"
            self.add("step_after_done", True, detail)
        else:
            detail = "a step after done returned done=False: the finished episode silently "
            detail += "continues; refuse it ('episode is over, call reset()') or stay done"
            self.add("step_after_done", False, detail, "warning")

    # -- invalid actions ------------------------------------------------------------------

    async def check_invalid_actions(self, session: Session) -> None:
        schema = self.schemas.get("action")
        if schema is None or not self.actions:
            for name in INVALID_CHECKS:
                self.skip(name, "no action schema or no valid sample action to start from")
            return
        base = {k: v for k, v in self.actions[0].items() if k != "metadata"}
        unknown, what = {**base, UNKNOWN_FIELD: 1}, f"the unknown field {UNKNOWN_FIELD!r}"
        await self.guard(
            _INVALID[0], self._refused, session, _INVALID[0], UNKNOWN_FIELD, unknown, what
        )
        wrong = wrong_type_probe(schema, base)
        if wrong is None:
            self.skip(_INVALID[1], "the action schema has no typed field to violate")
        else:
            field_name, bad, payload = wrong
            what = f"{field_name}={short(bad, 50)} (wrong type)"
            await self.guard(
                _INVALID[1], self._refused, session, _INVALID[1], field_name, payload, what
            )
        missing = missing_field_probe(schema, base)
        name = INVALID_CHECKS[2]
        if missing is None:
            self.skip(name, "the action schema has no required field")
        else:
            field_name, payload = missing
            what = f"no {field_name!r} (a required field)"
            await self.guard(name, self._refused, session, name, field_name, payload, what)

    async def _refused(
        self, session: Session, name: str, field_name: str, payload: dict[str, Any], what: str
    ) -> None:
        problems, seen = [], []
        try:
            obs = await session.step(payload)
        except WireError as exc:
            text = exc.message
            if exc.code != WSErrorCode.VALIDATION_ERROR.value:
                problems.append(f"answered {exc.code} instead of VALIDATION_ERROR: {text}")
            elif not names_field(field_name, exc.data.get("errors"), text):
                problems.append(f"the VALIDATION_ERROR does not name {field_name!r}: {text}")
            else:
                seen.append(f"VALIDATION_ERROR ({short(text, 100)})")
        else:
            problems.append(f"it was ACCEPTED (the environment stepped: {short(obs, 80)})")
            problems.append(_ACCEPT_HINTS[name])
        try:
            await session.state()
        except WireError as exc:
            problems.append(f"the session was unusable afterwards: {exc}")
        for problem in await self.driver.refusals(payload, field_name):
            (seen if problem.startswith("ok: ") else problems).append(problem.removeprefix("ok: "))
        if problems:
            self.add(name, False, f"an action with {what}: " + "; ".join(problems))
        else:
            self.add(name, True, f"an action with {what} is refused: " + "; ".join(seen))

    # -- isolation --------------------------------------------------------------------------

    async def check_isolation(self, session: Session) -> None:
        severity, why = self.driver.isolation()
        if severity is None:
            self.skip("isolation", why)
            return
        if not self.actions:
            self.skip("isolation", "no valid sample actions")
            return
        try:
            other = await self.driver.open()
        except Unavailable as exc:
            self.skip("isolation", str(exc))
            return
        try:
            await session.reset(self.seed)
            await other.reset(self.seed)
            before = normalize(await other.state())
            stepped = 0
            for action in self.actions[:_ISOLATION_STEPS]:
                stepped += 1
                if (await session.step(action)).get("done"):
                    break
            after = normalize(await other.state())
        except WireError as exc:
            self.skip("isolation", f"driving two sessions failed: {exc}")
            return
        diff = first_difference(before, after)
        if diff:
            detail = f"stepping one session {stepped} times changed ANOTHER session's state "
            detail += f"(before != after): {diff}. The sessions share state (class-level mutable "
            detail += f"attributes, module globals, or one object handed out by the factory){why}"
            self.add("isolation", False, detail, severity)
        else:
            detail = f"stepping one session {stepped} times left another session's state unchanged"
            self.add("isolation", True, detail, severity)

    # -- schemas of what was seen ---------------------------------------------------------

    async def check_observation_schema(self) -> None:
        schema = self.schemas.get("observation")
        if schema is None or not self.observations:
            self.skip("observation_schema", "no observation schema or no observations")
            return
        problems, checked, exempt = [], 0, 0
        for label, obs, is_reset in self.observations:
            if self.mcp and is_reset:
                exempt += 1  # MCP environments reset with their own observation type
                continue
            checked += 1
            errors = validate(obs, schema)
            if errors:
                problems.append(f"{label}: {'; '.join(errors[:3])}")
        title = schema.get("title", "observation")
        if problems:
            detail = f"{len(problems)} of {checked} observations do not match the published "
            self.add(
                "observation_schema", False, detail + f"{title} schema: " + "; ".join(problems[:3])
            )
        else:
            note = f" ({exempt} MCP reset observations exempt)" if exempt else ""
            detail = f"{checked} observations match the published {title} schema{note}"
            self.add("observation_schema", True, detail)

    async def check_state_schema(self) -> None:
        schema = self.schemas.get("state")
        if schema is None or not self.states:
            self.skip("state_schema", "no state schema or no states")
            return
        problems = [
            f"{label} state: {'; '.join(errors[:3])}"
            for label, st in self.states
            if (errors := validate(st, schema))
        ]
        title = schema.get("title", "state")
        if problems:
            detail = f"states do not match the published {title} schema: "
            self.add("state_schema", False, detail + "; ".join(dict.fromkeys(problems[:3])))
        else:
            detail = f"{len(self.states)} states match the published {title} schema"
            self.add("state_schema", True, detail)


_DECLARE_HINT = (
    "declare legal sample actions as the action model's JSON Schema examples "
    "(docs/testing.md) or pass sample_actions=[...]"
)

_ACCEPT_HINTS = {
    _INVALID[0]: "a misspelled field would be silently ignored; keep extra='forbid' (the Action "
    "base class sets it)",
    _INVALID[1]: "give the field a concrete type instead of Any / a permissive validator",
    INVALID_CHECKS[2]: "make the field required only if it really is, or give it a default",
}


def _payload(item: Any) -> Any:
    """A given sample as a wire dict (an Action model is dumped; empty metadata dropped)."""
    if not isinstance(item, BaseModel):
        return item
    data = item.model_dump(mode="json")
    if not data.get("metadata"):
        data.pop("metadata", None)
    return data
