"""`check_server`: the environment checks over the wire, against a running server."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
from pydantic import BaseModel, ValidationError

from openenv.core.client_types import StepResult
from openenv.core.env_server.types import EnvironmentMetadata
from openenv.core.errors import ServerError
from openenv.core.generic_client import GenericEnvClient
from openenv.core.utils import convert_to_http_url, run_coroutine_sync

from ._jsonutil import (
    check_schema,
    first_difference,
    normalize,
    schema_validator_name,
    short,
    validate,
    without,
)
from .env_checker import DEFAULT_STEPS, _exc, _wire_observation
from .report import CheckReport
from .samples import (
    UNKNOWN_FIELD,
    SampleGenerationError,
    missing_field_probe,
    sample_actions_from_schema,
    tool_call_samples,
    wrong_type_probe,
)

SESSION_HEADER = "X-OpenEnv-Session-Id"
_NO_HTTP_ROUTES = "the server has no HTTP /reset, /step, /state (production mode)"
_CONCURRENCY_STEPS = 3
_RELEASE_WAIT_S = 3.0


@dataclass
class _WireRun:
    """One episode over the wire: observations rebuilt as a client sees them."""

    label: str
    reset: dict[str, Any] | None = None
    reset_error: BaseException | None = None
    observations: list[dict[str, Any]] = field(default_factory=list)
    states: list[Any] = field(default_factory=list)
    raw_states: list[Any] = field(default_factory=list)
    step_error: tuple[int, BaseException] | None = None
    done_at: int | None = None


def _from_result(result: StepResult[Any]) -> dict[str, Any]:
    obs = dict(result.observation) if isinstance(result.observation, dict) else {}
    obs["reward"] = result.reward
    obs["done"] = result.done
    obs["metadata"] = result.metadata
    return obs


def _names_field(field_name: str, errors: Any, detail: Any) -> bool:
    for err in errors if isinstance(errors, list) else []:
        loc = err.get("loc") if isinstance(err, dict) else None
        if isinstance(loc, (list, tuple)) and loc:
            # FastAPI prefixes body errors with ("body", "action"); ours start at the field.
            if field_name in [str(p) for p in loc[:3]]:
                return True
    return isinstance(detail, str) and field_name in detail


def _error_text(errors: Any, detail: Any) -> str:
    if isinstance(detail, str) and detail:
        return detail
    parts = []
    for err in errors if isinstance(errors, list) else []:
        if isinstance(err, dict):
            loc = ".".join(str(p) for p in err.get("loc", ()))
            parts.append(f"{loc}: {err.get('msg')}")
    return "; ".join(parts[:3]) or short(errors)


class _ServerChecker:
    def __init__(
        self,
        base_url: str,
        sample_actions: list[Any] | None,
        seed: int,
        steps: int,
        timeout_s: float,
        headers: dict[str, str] | None,
    ) -> None:
        self.base = convert_to_http_url(base_url)
        self.report = CheckReport(target=self.base, kind="server")
        self.given_samples = sample_actions
        self.seed = seed
        self.steps = max(1, steps)
        self.timeout_s = timeout_s
        self.headers = dict(headers or {})
        self.http: httpx.AsyncClient
        self.clients: list[GenericEnvClient] = []
        self.schemas: dict[str, Any] = {}
        self.mcp = False
        self.tools: list[dict[str, Any]] = []
        self.actions: list[dict[str, Any]] = []
        self.sample_source = ""
        self.capacity: dict[str, Any] | None = None
        self.http_routes = True
        self.wire_observations: list[tuple[str, dict[str, Any], bool]] = []
        self.wire_states: list[tuple[str, Any]] = []

    # -- plumbing ---------------------------------------------------------------------------

    def _client(self) -> GenericEnvClient:
        client = GenericEnvClient(
            self.base,
            connect_timeout_s=self.timeout_s,
            message_timeout_s=self.timeout_s,
            headers=self.headers,
            resume=False,
        )
        self.clients.append(client)
        return client

    async def _get_json(self, path: str) -> tuple[int, Any]:
        response = await self.http.get(path)
        try:
            body = response.json()
        except ValueError:
            body = response.text
        return response.status_code, body

    async def _episode(self, client: GenericEnvClient, label: str) -> _WireRun:
        run = _WireRun(label)
        try:
            run.reset = _from_result(await client.reset(seed=self.seed))
        except Exception as exc:
            run.reset_error = exc
            return run
        self.wire_observations.append((f"{label} reset", run.reset, True))
        await self._wire_state(client, run)
        for i, action in enumerate(self.actions[: self.steps]):
            try:
                obs = _from_result(await client.step(action))
            except Exception as exc:
                run.step_error = (i, exc)
                break
            run.observations.append(obs)
            self.wire_observations.append((f"{label} step #{i}", obs, False))
            await self._wire_state(client, run)
            if obs.get("done"):
                run.done_at = i
                break
        return run

    async def _wire_state(self, client: GenericEnvClient, run: _WireRun) -> None:
        try:
            st = await client.state()
        except Exception as exc:
            run.states.append(f"<state failed: {type(exc).__name__}>")
            run.raw_states.append(exc)
            return
        run.states.append(without(normalize(st), "episode_id"))
        run.raw_states.append(st)
        self.wire_states.append((run.label, st))

    # -- the checks ---------------------------------------------------------------------------

    async def run(self) -> CheckReport:
        async with httpx.AsyncClient(
            base_url=self.base, timeout=self.timeout_s, headers=self.headers
        ) as http:
            self.http = http
            try:
                await self._run()
            finally:
                for client in self.clients:
                    with contextlib.suppress(Exception):
                        await client.close()
        return self.report

    async def _run(self) -> None:
        report = self.report
        if not await self._check_health():
            return
        await self.report.guard("metadata", self._check_metadata)
        await self.report.guard("schema", self._check_schema)
        await self.report.guard("openapi_version", self._check_openapi)
        with contextlib.suppress(Exception):
            status, body = await self._get_json("/capacity")
            if status == 200 and isinstance(body, dict):
                self.capacity = body
        await self.report.guard("mcp_tools", self._discover_mcp)
        await self.report.guard("sample_actions", self._make_samples)

        client = self._client()
        run1 = await self._episode(client, "ws")
        self._check_ws_reset(run1)
        self._check_ws_step(run1)
        self._check_ws_state(run1)
        if run1.reset_error is None and self.actions:
            run2 = await self._episode(client, "ws (again)")
            await self.report.guard("determinism", self._check_determinism, run1, run2)
            await self.report.guard("step_after_done", self._check_step_after_done, client, run2)
        else:
            report.skipped("determinism", "the WebSocket episode could not run")
            report.skipped("step_after_done", "the WebSocket episode could not run")
        await self.report.guard("invalid_action", self._check_invalid_actions, client)
        await self.report.guard("mcp_tools", self._check_mcp_ws, client)
        with contextlib.suppress(Exception):
            await client.close()

        await self.report.guard("http_session", self._check_http_session, run1)
        await self.report.guard("http_stateless", self._check_http_stateless)
        await self.report.guard("observation_schema", self._check_observation_schema)
        await self.report.guard("state_schema", self._check_state_schema)
        await self.report.guard("concurrent_sessions", self._check_concurrency)
        await self.report.guard("sessions_released", self._check_sessions_released)

    async def _check_health(self) -> bool:
        try:
            status, body = await self._get_json("/health")
        except httpx.HTTPError as exc:
            self.report.failed(
                "health",
                f"cannot reach {self.base}/health ({_exc(exc)}); no other check was run",
            )
            return False
        if status == 200 and isinstance(body, dict) and body.get("status") == "healthy":
            self.report.passed("health", 'GET /health -> {"status": "healthy"}')
        else:
            self.report.failed("health", f"GET /health -> {status} {short(body)}")
        return True

    async def _check_metadata(self) -> None:
        status, body = await self._get_json("/metadata")
        if status != 200:
            self.report.failed("metadata", f"GET /metadata -> {status} {short(body, 200)}")
            return
        try:
            meta = EnvironmentMetadata.model_validate(body)
        except ValidationError as exc:
            self.report.failed("metadata", f"GET /metadata is not EnvironmentMetadata: {exc}")
            return
        self.report.passed(
            "metadata", f"{meta.name} {meta.version or '(no version)'}: {short(meta.description)}"
        )

    async def _check_schema(self) -> None:
        status, body = await self._get_json("/schema")
        if status != 200 or not isinstance(body, dict):
            self.report.failed("schema", f"GET /schema -> {status} {short(body, 200)}")
            return
        problems = []
        for key in ("action", "observation", "state"):
            schema = body.get(key)
            if not isinstance(schema, dict):
                problems.append(f"{key!r} is missing or not an object")
                continue
            self.schemas[key] = schema
            for err in check_schema(schema):
                problems.append(f"{key} schema is not a valid JSON Schema: {err}")
        if problems:
            self.report.failed("schema", "; ".join(problems))
        else:
            titles = ", ".join(f"{k} {self.schemas[k].get('title', '?')}" for k in self.schemas)
            self.report.passed("schema", f"GET /schema: {titles} ({schema_validator_name()})")

    async def _check_openapi(self) -> None:
        status, body = await self._get_json("/openapi.json")
        version = body.get("info", {}).get("version") if isinstance(body, dict) else None
        if status == 200 and isinstance(version, str) and version.startswith("1."):
            self.report.passed("openapi_version", f"info.version is {version!r}")
        else:
            self.report.failed(
                "openapi_version",
                f"GET /openapi.json -> {status}, info.version {version!r}; OpenEnv tooling "
                "expects a '1.x' protocol version",
            )

    async def _discover_mcp(self) -> None:
        action_schema = self.schemas.get("action") or {}
        looks_mcp = "tool_name" in (action_schema.get("properties") or {})
        rpc = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        try:
            response = await self.http.post("/mcp", json=rpc)
            reply = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            reply = {"error": {"message": _exc(exc)}}
        result = reply.get("result") if isinstance(reply, dict) else None
        tools = result.get("tools") if isinstance(result, dict) else None
        if isinstance(tools, list):
            self.mcp = True
            self.tools = [t for t in tools if isinstance(t, dict)]
            return
        error = reply.get("error") if isinstance(reply, dict) else None
        message = error.get("message") if isinstance(error, dict) else short(reply)
        if looks_mcp:
            self.report.failed(
                "mcp_tools",
                f"the action schema is a tool call, but POST /mcp tools/list failed: {message}",
            )
        else:
            self.report.skipped("mcp_tools", f"not an MCP environment (tools/list: {message})")

    def _make_samples(self) -> None:
        report = self.report
        payloads: list[Any]
        if self.given_samples is not None:
            payloads = []
            for item in self.given_samples:
                if isinstance(item, BaseModel):
                    data = item.model_dump(mode="json")
                    if not data.get("metadata"):
                        data.pop("metadata", None)
                    payloads.append(data)
                else:
                    payloads.append(item)
            self.sample_source = "given"
        else:
            try:
                if self.mcp:
                    payloads = tool_call_samples(self.tools, self.steps)
                    self.sample_source = "generated from the tools' input schemas"
                elif "action" in self.schemas:
                    payloads = sample_actions_from_schema(self.schemas["action"], self.steps)
                    self.sample_source = "generated from the action schema"
                else:
                    report.skipped("sample_actions", "no action schema")
                    return
            except SampleGenerationError as exc:
                report.failed(
                    "sample_actions",
                    f"could not generate actions from the schema ({exc}); pass sample_actions=",
                )
                return
        bad = [p for p in payloads if not isinstance(p, dict)]
        if bad or not payloads:
            report.failed(
                "sample_actions", "sample_actions must be a non-empty list of dicts/Actions"
            )
            return
        problems = []
        schema = self.schemas.get("action")
        if schema is not None and not self.mcp:
            for i, payload in enumerate(payloads):
                errors = validate(payload, schema)
                if errors:
                    problems.append(f"#{i} {short(payload, 60)}: {'; '.join(errors[:2])}")
        if problems:
            hint = "" if self.sample_source == "given" else "; pass sample_actions=[...]"
            report.failed(
                "sample_actions",
                f"{self.sample_source} actions do not match the published action schema: "
                + "; ".join(problems[:3])
                + hint,
            )
            return
        report.passed(
            "sample_actions",
            f"{len(payloads)} actions {self.sample_source}, e.g. {short(payloads[0], 100)}",
        )
        # Episodes take `steps` actions, cycling through the samples.
        self.actions = [payloads[i % len(payloads)] for i in range(max(self.steps, len(payloads)))]

    def _check_ws_reset(self, run: _WireRun) -> None:
        if run.reset_error is not None:
            self.report.failed(
                "ws_reset", f"reset(seed={self.seed}) over /ws raised {_exc(run.reset_error)}"
            )
        else:
            assert run.reset is not None
            self.report.passed(
                "ws_reset",
                f"reset(seed={self.seed}) -> done={run.reset.get('done')}, "
                f"reward={run.reset.get('reward')!r}",
            )

    def _check_ws_step(self, run: _WireRun) -> None:
        if run.reset_error is not None:
            self.report.skipped("ws_step", "reset failed")
            return
        if not self.actions:
            self.report.skipped("ws_step", "no valid sample actions")
            return
        if run.step_error is not None:
            i, exc = run.step_error
            hint = (
                "an observation field cannot be encoded as JSON (check_env names the field)"
                if "not JSON serializable" in str(exc)
                else f"if the sample actions ({self.sample_source}) make no sense here, pass "
                "sample_actions=[...]"
            )
            self.report.failed(
                "ws_step",
                f"step #{i} with {short(self.actions[i], 80)} over /ws raised {_exc(exc)}; {hint}",
            )
            return
        ended = f", done after {len(run.observations)}" if run.done_at is not None else ""
        self.report.passed(
            "ws_step",
            f"{len(run.observations)} of {len(self.actions[: self.steps])} steps answered{ended}",
        )

    def _check_ws_state(self, run: _WireRun) -> None:
        if not run.raw_states:
            self.report.skipped("ws_state", "reset failed")
            return
        failures = [s for s in run.raw_states if isinstance(s, BaseException)]
        if failures:
            self.report.failed("ws_state", f"state over /ws raised {_exc(failures[0])}")
            return
        last = run.raw_states[-1]
        if not isinstance(last, dict) or not isinstance(last.get("step_count"), int):
            self.report.failed("ws_state", f"state is not a State: {short(last)}")
            return
        self.report.passed(
            "ws_state",
            f"state after the episode: step_count={last['step_count']}, "
            f"episode_id={short(last.get('episode_id'), 40)}",
        )

    def _check_determinism(self, run1: _WireRun, run2: _WireRun) -> None:
        report = self.report
        if run2.reset_error is not None:
            report.failed("determinism", f"the second reset raised {_exc(run2.reset_error)}")
            return
        taken = max(len(run1.observations), len(run2.observations))
        where = (
            f"reset(seed={self.seed}) twice in one /ws session, each followed by the same actions "
            f"({taken} steps)"
        )
        diff = first_difference(normalize(run1.reset), normalize(run2.reset))
        problem = f"the reset observations differ at {diff}" if diff else None
        if problem is None:
            for i, (a, b) in enumerate(zip(run1.observations, run2.observations, strict=False)):
                diff = first_difference(a, b)
                if diff:
                    problem = f"the observations of step #{i} differ at {diff}"
                    break
        if problem is None and len(run1.observations) != len(run2.observations):
            problem = (
                f"the first episode took {len(run1.observations)} steps, the second "
                f"{len(run2.observations)}"
            )
        if problem:
            report.failed(
                "determinism",
                f"NOT DETERMINISTIC: {where}: {problem}. Derive every random choice from the "
                "seed, not from global random state, the clock or uuid4.",
            )
            return
        for i, (a, b) in enumerate(zip(run1.states, run2.states, strict=False)):
            diff = first_difference(a, b)
            if diff:
                label = "after reset" if i == 0 else f"after step #{i - 1}"
                report.failed(
                    "determinism",
                    f"observations are deterministic but the state is not ({where}; "
                    f"episode_id ignored): the states {label} differ at {diff}",
                    severity="warning",
                )
                return
        report.passed(
            "determinism",
            f"{where} gave identical observations and states (episode_id ignored)",
        )

    async def _check_step_after_done(self, client: GenericEnvClient, run: _WireRun) -> None:
        report = self.report
        if run.done_at is None:
            report.skipped(
                "step_after_done",
                f"no episode ended within {len(self.actions[: self.steps])} steps",
            )
            return
        action = self.actions[(run.done_at + 1) % len(self.actions)]
        try:
            result = await client.step(action)
        except ServerError as exc:
            report.passed(
                "step_after_done",
                f"a step after done is refused with {exc.code}: {short(exc.message, 120)}",
            )
            return
        except Exception as exc:
            report.failed("step_after_done", f"a step after done raised {_exc(exc)}")
            return
        if result.done:
            report.passed("step_after_done", "a step after done returns another done observation")
        else:
            report.failed(
                "step_after_done",
                "a step after done returned done=False: the finished episode silently continues",
                severity="warning",
            )

    async def _check_invalid_actions(self, client: GenericEnvClient) -> None:
        report = self.report
        names = (
            "invalid_action_unknown_field",
            "invalid_action_wrong_type",
            "invalid_action_missing_field",
        )
        schema = self.schemas.get("action")
        if schema is None or not self.actions:
            for name in names:
                report.skipped(name, "no action schema or no valid sample action")
            return
        base = {k: v for k, v in self.actions[0].items() if k != "metadata"}
        probes: list[tuple[str, str, dict[str, Any], str] | tuple[str, None, str]] = []
        probes.append((names[0], UNKNOWN_FIELD, {**base, UNKNOWN_FIELD: 1}, "an unknown field"))
        wrong = wrong_type_probe(schema, base)
        if wrong is None:
            probes.append((names[1], None, "the action schema has no typed field to violate"))
        else:
            field_name, bad, payload = wrong
            probes.append((names[1], field_name, payload, f"{field_name}={short(bad, 50)}"))
        missing = missing_field_probe(schema, base)
        if missing is None:
            probes.append((names[2], None, "the action schema has no required field"))
        else:
            field_name, payload = missing
            probes.append((names[2], field_name, payload, f"no {field_name!r}"))
        for probe in probes:
            if probe[1] is None:
                report.skipped(probe[0], probe[2])  # type: ignore[misc]
                continue
            name, field_name, payload, what = probe  # type: ignore[misc]
            problems = []
            seen = []
            # Over /ws: a VALIDATION_ERROR frame naming the field; the session stays usable.
            try:
                await client.step(payload)
            except ServerError as exc:
                text = _error_text(exc.data.get("errors"), exc.data.get("detail"))
                if exc.code != "VALIDATION_ERROR":
                    problems.append(f"/ws answered {exc.code} instead of VALIDATION_ERROR: {text}")
                elif not _names_field(field_name, exc.data.get("errors"), exc.data.get("detail")):
                    problems.append(f"/ws VALIDATION_ERROR does not name {field_name!r}: {text}")
                else:
                    seen.append(f"/ws VALIDATION_ERROR ({short(text, 100)})")
            except Exception as exc:
                problems.append(f"/ws step raised {_exc(exc)}")
            else:
                problems.append("/ws ACCEPTED it (the environment stepped)")
            try:
                await client.state()
            except Exception as exc:
                problems.append(f"the /ws session was unusable afterwards: {_exc(exc)}")
            # Over HTTP: 422 with pydantic's field errors.
            try:
                response = await self.http.post("/step", json={"action": payload})
                try:
                    body = response.json()
                except ValueError:
                    body = response.text
                detail = body.get("detail") if isinstance(body, dict) else None
                if response.status_code in (404, 405):
                    seen.append("no HTTP /step (production mode)")
                elif response.status_code != 422:
                    problems.append(f"POST /step answered {response.status_code}, not 422")
                elif not _names_field(field_name, detail, None):
                    problems.append(f"POST /step 422 does not name {field_name!r}: {short(detail)}")
                else:
                    seen.append("POST /step 422")
            except httpx.HTTPError as exc:
                problems.append(f"POST /step failed: {_exc(exc)}")
            if problems:
                report.failed(name, f"an action with {what}: " + "; ".join(problems))
            else:
                report.passed(name, f"an action with {what} is rejected: " + "; ".join(seen))

    async def _check_mcp_ws(self, client: GenericEnvClient) -> None:
        if not self.mcp:
            return
        names = [t.get("name") for t in self.tools]
        problems = []
        for tool in self.tools:
            schema = tool.get("inputSchema")
            if not isinstance(schema, dict):
                problems.append(f"tool {tool.get('name')!r} has no inputSchema object")
            else:
                problems += [
                    f"tool {tool.get('name')!r} input schema: {e}" for e in check_schema(schema)
                ]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            problems.append(f"duplicate tool names {dupes}")
        try:
            reply = await client.mcp_request("tools/list")
            ws_tools = (reply.get("result") or {}).get("tools")
            ws_names = [t.get("name") for t in ws_tools] if isinstance(ws_tools, list) else None
            if ws_names is None:
                problems.append(f'{{"type":"mcp"}} tools/list over /ws failed: {short(reply)}')
            elif sorted(ws_names) != sorted(names):
                problems.append(f"/ws lists tools {ws_names}, POST /mcp lists {names}")
        except Exception as exc:
            problems.append(f'{{"type":"mcp"}} tools/list over /ws raised {_exc(exc)}')
        if problems:
            self.report.failed("mcp_tools", "; ".join(problems))
        else:
            self.report.passed(
                "mcp_tools",
                f"tools/list (POST /mcp and /ws) -> {len(names)} tools: "
                + ", ".join(map(str, names)),
            )

    async def _check_http_session(self, ws_run: _WireRun) -> None:
        report = self.report
        http = self.http
        problems: list[str] = []
        observations: list[dict[str, Any]] = []
        state: Any = None
        sid: str | None = None
        deleted = False
        try:
            response = await http.post(
                "/reset", json={"seed": self.seed}, headers={SESSION_HEADER: "new"}
            )
            if response.status_code in (404, 405):
                self.http_routes = False
                report.skipped("http_session", _NO_HTTP_ROUTES)
                return
            body = response.json()
            if response.status_code != 200 or not isinstance(body, dict):
                report.failed(
                    "http_session",
                    f"POST /reset with {SESSION_HEADER}: new -> {response.status_code} "
                    f"{short(body, 200)}",
                )
                return
            sid = body.get("session_id") or response.headers.get(SESSION_HEADER)
            if not sid or response.headers.get(SESSION_HEADER) != body.get("session_id"):
                report.failed(
                    "http_session",
                    f"POST /reset with {SESSION_HEADER}: new did not return the session id in "
                    f"the body and the {SESSION_HEADER} header",
                )
                return
            observations.append(_wire_observation(body))
            self.wire_observations.append(("http reset", observations[-1], True))
            headers = {SESSION_HEADER: sid}
            for i, action in enumerate(self.actions[: self.steps]):
                response = await http.post("/step", json={"action": action}, headers=headers)
                if response.status_code != 200:
                    problems.append(
                        f"POST /step #{i} in the session -> {response.status_code} "
                        f"{short(response.text, 200)}"
                    )
                    break
                obs = _wire_observation(response.json())
                observations.append(obs)
                self.wire_observations.append((f"http step #{i}", obs, False))
                if obs.get("done"):
                    break
            response = await http.get("/state", headers=headers)
            state = response.json() if response.status_code == 200 else None
            if state is None:
                problems.append(f"GET /state in the session -> {response.status_code}")
            else:
                self.wire_states.append(("http", state))
            response = await http.delete(f"/sessions/{sid}")
            deleted = True
            if response.status_code != 200:
                problems.append(f"DELETE /sessions/{{id}} -> {response.status_code}")
            response = await http.get("/state", headers=headers)
            if response.status_code != 404:
                problems.append(
                    f"GET /state of the closed session -> {response.status_code}, not 404"
                )
        except (httpx.HTTPError, ValueError) as exc:
            problems.append(_exc(exc))
        finally:
            if sid and not deleted:  # never leave a session behind
                for _ in range(2):  # a server that just failed may have dropped the connection
                    with contextlib.suppress(Exception):
                        await http.delete(f"/sessions/{sid}")
                        break
        if problems:
            report.failed("http_session", "; ".join(problems))
            return
        steps = len(observations) - 1
        count = state.get("step_count") if isinstance(state, dict) else None
        report.passed(
            "http_session",
            f"{SESSION_HEADER}: new opened a session; reset + {steps} steps + state "
            f"(step_count={count}); DELETE /sessions/{{id}} closed it (then 404)",
        )
        # Both transports serve the same environment the same way.
        if ws_run.reset is None:
            return
        ws_obs = [ws_run.reset, *ws_run.observations]
        for i, (a, b) in enumerate(zip(ws_obs, observations, strict=False)):
            diff = first_difference(normalize(a), normalize(b))
            if diff:
                label = "reset" if i == 0 else f"step #{i - 1}"
                report.failed(
                    "transport_consistency",
                    f"the same seeded episode differs between /ws and HTTP at {label}: {diff}",
                    severity="warning",
                )
                return
        report.passed(
            "transport_consistency",
            f"the seeded episode is identical over /ws and HTTP ({len(ws_obs)} observations)",
            severity="warning",
        )

    async def _check_http_stateless(self) -> None:
        if not self.http_routes:
            self.report.skipped("http_stateless", _NO_HTTP_ROUTES)
            return
        try:
            response = await self.http.post("/reset", json={"seed": self.seed})
            body = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            self.report.failed("http_stateless", f"POST /reset failed: {_exc(exc)}")
            return
        if response.status_code == 200 and isinstance(body, dict) and "observation" in body:
            self.report.passed(
                "http_stateless", "POST /reset without a session answers (OpenEnv's behaviour)"
            )
        else:
            self.report.failed(
                "http_stateless", f"POST /reset -> {response.status_code} {short(body, 200)}"
            )

    def _check_observation_schema(self) -> None:
        schema = self.schemas.get("observation")
        if schema is None or not self.wire_observations:
            self.report.skipped("observation_schema", "no observation schema or no observations")
            return
        problems = []
        checked = exempt = 0
        for label, obs, is_reset in self.wire_observations:
            if self.mcp and is_reset:
                exempt += 1  # MCP environments reset with their own observation type
                continue
            checked += 1
            errors = validate(obs, schema)
            if errors:
                problems.append(f"{label}: {'; '.join(errors[:3])}")
        title = schema.get("title", "observation")
        if problems:
            self.report.failed(
                "observation_schema",
                f"{len(problems)} of {checked} observations do not match the published {title} "
                f"schema: " + "; ".join(problems[:3]),
            )
        else:
            note = f" ({exempt} MCP reset observations exempt)" if exempt else ""
            self.report.passed(
                "observation_schema",
                f"{checked} observations match the published {title} schema "
                f"({schema_validator_name()}){note}",
            )

    def _check_state_schema(self) -> None:
        schema = self.schemas.get("state")
        if schema is None or not self.wire_states:
            self.report.skipped("state_schema", "no state schema or no states")
            return
        problems = []
        for label, st in self.wire_states:
            errors = validate(st, schema)
            if errors:
                problems.append(f"{label} state: {'; '.join(errors[:3])}")
        title = schema.get("title", "state")
        if problems:
            self.report.failed(
                "state_schema",
                f"states do not match the published {title} schema: "
                + "; ".join(dict.fromkeys(problems[:3])),
            )
        else:
            self.report.passed(
                "state_schema", f"{len(self.wire_states)} states match the published {title} schema"
            )

    async def _check_concurrency(self) -> None:
        report = self.report
        if not self.actions:
            report.skipped("concurrent_sessions", "no valid sample actions")
            return
        max_sessions = (self.capacity or {}).get("max_sessions")
        if isinstance(max_sessions, int) and max_sessions < 2:
            report.skipped(
                "concurrent_sessions",
                f"the server serves one session at a time (max_sessions={max_sessions})",
            )
            return
        one, two = self._client(), self._client()
        try:
            await one.reset(seed=self.seed)
            await two.reset(seed=self.seed)
            await two.step(self.actions[-1])  # the sessions are stepped differently
            before = normalize(await two.state())
            stepped = 0
            for action in self.actions[:_CONCURRENCY_STEPS]:
                result = await one.step(action)
                stepped += 1
                if result.done:
                    break
            after = normalize(await two.state())
        except Exception as exc:
            report.failed("concurrent_sessions", f"driving two /ws sessions raised {_exc(exc)}")
            return
        finally:
            for client in (one, two):
                with contextlib.suppress(Exception):
                    await client.close()
        diff = first_difference(before, after)
        if diff:
            report.failed(
                "concurrent_sessions",
                f"stepping one /ws session {stepped} times changed ANOTHER session's state "
                "(before != after): "
                f"{diff}. The environment's instances share state, yet it declares "
                "SUPPORTS_CONCURRENT_SESSIONS",
            )
        else:
            report.passed(
                "concurrent_sessions",
                f"stepping one /ws session {stepped} times left another session's state unchanged",
            )

    async def _check_sessions_released(self) -> None:
        if self.capacity is None:
            self.report.skipped("sessions_released", "no /capacity endpoint", severity="warning")
            return
        baseline = self.capacity.get("active_sessions", 0)
        deadline = time.monotonic() + _RELEASE_WAIT_S
        active = None
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                status, body = await self._get_json("/capacity")
                if status == 200 and isinstance(body, dict):
                    active = body.get("active_sessions")
                    if isinstance(active, int) and active <= baseline:
                        self.report.passed(
                            "sessions_released",
                            f"every session the checker opened was released "
                            f"(active_sessions back to {active})",
                            severity="warning",
                        )
                        return
            await asyncio.sleep(0.05)
        self.report.failed(
            "sessions_released",
            f"active_sessions is {active} after the checker closed its sessions, "
            f"{baseline} before (other clients may be connected)",
            severity="warning",
        )


async def acheck_server(
    base_url: str,
    *,
    sample_actions: list[Any] | None = None,
    seed: int = 0,
    steps: int = DEFAULT_STEPS,
    timeout_s: float = 10.0,
    headers: dict[str, str] | None = None,
    raise_on_failure: bool = True,
) -> CheckReport:
    """`check_server` for callers already inside an event loop."""
    checker = _ServerChecker(base_url, sample_actions, seed, steps, timeout_s, headers)
    report = await checker.run()
    if raise_on_failure:
        report.raise_for_failures()
    return report


def check_server(
    base_url: str,
    *,
    sample_actions: list[Any] | None = None,
    seed: int = 0,
    steps: int = DEFAULT_STEPS,
    timeout_s: float = 10.0,
    headers: dict[str, str] | None = None,
    raise_on_failure: bool = True,
) -> CheckReport:
    """Check a running environment server over the wire.

    Uses httpx for the HTTP routes and `GenericEnvClient` (raw dict actions) for `/ws`:
    /health, /metadata, /schema (observations and states must validate against the schemas it
    publishes: jsonschema when installed, else a structural check), /openapi.json's protocol
    version, a seeded episode over /ws (reset, step, state) run twice for determinism, an HTTP
    session episode, invalid actions (VALIDATION_ERROR over /ws, 422 over HTTP), two concurrent
    sessions that must not share state, and MCP tools/list when the environment has tools.

    `sample_actions` are wire dicts or Action models; by default they are generated from the
    published action schema (or the MCP tools' input schemas). The checker opens a few sessions
    and closes them all. Returns a `CheckReport`; with `raise_on_failure` (the default) raises
    `EnvCheckError` listing every failed check.
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
