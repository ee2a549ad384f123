"""The two drivers of the checks: an environment class in-process, and a server at a URL.

`InProcessDriver` drives instances the way the server does (async overrides, a worker thread
for sync methods, `mcp_session()`, keyword filtering) and turns what they return into the wire
format, reporting what a server would refuse. `UrlDriver` talks to a running server over `/ws`
(one `GenericEnvClient` per session) and HTTP. Each adds the checks only it can make.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
import typing
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

import httpx
import orjson
from pydantic import ValidationError

from openenv.core.env_server.interfaces import (
    Environment,
    overrides,
    session_context_of,
    state_class_of,
)
from openenv.core.env_server.serialization import deserialize_action, serialize_observation
from openenv.core.env_server.sessions import factory_class, factory_name, filter_kwargs
from openenv.core.env_server.types import Action, Observation, State
from openenv.core.errors import ServerError
from openenv.core.errors import exception_message as _exc
from openenv.core.generic_client import GenericEnvClient
from openenv.core.protocol import NEW_SESSION, SESSION_HEADER, WSErrorCode, dumps, loads
from openenv.core.utils import convert_to_http_url

from ._jsonutil import first_difference, normalize, short, unserializable_fields, without
from .checks import Checker, Episode, Unavailable, WireError, names_field
from .report import Severity

_RELEASE_WAIT_S = 3.0


def flat_observation(payload: dict[str, Any]) -> dict[str, Any]:
    """The observation a client rebuilds from a reset/step reply."""
    obs = dict(payload.get("observation") or {})
    obs["reward"] = payload.get("reward")
    obs["done"] = payload.get("done", False)
    if "metadata" in payload or "metadata" in obs:
        obs["metadata"] = payload.get("metadata") or obs.get("metadata") or {}
    return obs


def _validation_summary(exc: ValidationError, limit: int = 3) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in err.get('loc', ())) or '(root)'}: {err.get('msg')}"
        for err in exc.errors(include_url=False)[:limit]
    )


def _proper_subclass(value: Any, base: type) -> bool:
    return isinstance(value, type) and issubclass(value, base) and value is not base


def declared_types(env_cls: Any) -> tuple[type | None, type | None, type | None]:
    """`(action, observation, state)` classes an environment class declares.

    Read from `Environment[MyAction, MyObservation, MyState]` generics, then from the
    annotations of `step(action: ...)` and of the `step` / `reset` return values, and the
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
    for method, key, kind in (
        ("step", "action", Action),
        ("step", "return", Observation),
        ("reset", "return", Observation),
    ):
        with contextlib.suppress(Exception):
            hint = typing.get_type_hints(getattr(env_cls, method)).get(key)
            if found[kind] is None and _proper_subclass(hint, kind):
                found[kind] = hint
    if found[State] is None:
        st = state_class_of(env_cls)
        found[State] = st if st is not State else None
    return found[Action], found[Observation], found[State]


# -- in-process --------------------------------------------------------------------------------


class _Instance:
    """One environment instance as a session, driven the way the server drives it."""

    def __init__(self, driver: InProcessDriver, env: Any) -> None:
        self.driver = driver
        self.env = env
        self.stack = contextlib.AsyncExitStack()
        self.closed = False

    async def _sync(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        call = functools.partial(fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self.driver.executor, call)

    async def _call(self, what: str, work: Any) -> Any:
        try:
            return await work
        except ServerError as exc:  # e.g. InvalidActionError: the server sends its code
            raise WireError(exc.message, exc.code, exc.to_data()) from exc
        except Exception as exc:
            raise WireError(f"{what} raised {_exc(exc)}") from exc

    async def reset(self, seed: int) -> dict[str, Any]:
        env, kwargs = self.env, {"seed": seed}
        if overrides(type(env), "reset_async"):
            work = env.reset_async(**filter_kwargs(env.reset_async, kwargs))
        else:
            work = self._sync(env.reset, **filter_kwargs(env.reset, kwargs))
        obs = await self._call(f"reset(seed={seed})", work)
        return self.driver.wire(obs, "reset")

    async def step(self, payload: dict[str, Any]) -> dict[str, Any]:
        try:
            action = deserialize_action(payload, self.driver.action_cls or Action)
        except ValidationError as exc:
            errors = exc.errors(include_url=False)
            raise WireError(
                _validation_summary(exc), WSErrorCode.VALIDATION_ERROR.value, {"errors": errors}
            ) from None
        except Exception as exc:
            raise WireError(
                f"parsing the action raised {_exc(exc)} instead of a pydantic ValidationError; "
                "raise ValueError in validators"
            ) from exc
        env = self.env
        if overrides(type(env), "step_async"):
            work = env.step_async(action)
        else:
            work = self._sync(env.step, action)
        return self.driver.wire(await self._call("step()", work), "step")

    async def state(self) -> dict[str, Any]:
        st = await self._call("reading state", self._sync(lambda: self.env.state))
        declared = self.driver.state_cls
        if not isinstance(st, State):
            raise WireError(
                f"state returned {type(st).__name__} ({short(st, 60)}), expected a State"
            )
        if not isinstance(st, declared):
            raise WireError(
                f"state returned {type(st).__name__}, not the declared {declared.__name__} "
                "(GET /schema publishes the declared class)"
            )
        with contextlib.suppress(Exception):
            self.driver.state_objects.append(st.model_copy(deep=True))
        try:
            return loads(dumps(st.model_dump()))
        except (TypeError, orjson.JSONEncodeError) as exc:
            bad = ", ".join(unserializable_fields(st)) or str(exc)
            raise WireError(f"{type(st).__name__} is not JSON serializable: {bad}") from exc

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            await self.stack.aclose()
            await self._sync(self.env.close)


class InProcessDriver:
    """Drives an Environment class, a factory, or an instance (then with one session only)."""

    def __init__(
        self,
        source: Any,
        action_cls: Optional[type] = None,
        observation_cls: Optional[type] = None,
        state_cls: Optional[type] = None,
    ) -> None:
        self.source = source
        self.instance_given = isinstance(source, Environment)
        self.env_cls = type(source) if self.instance_given else factory_class(source)
        self.given = (action_cls, observation_cls, state_cls)
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="openenv-check")
        self.instances: list[_Instance] = []
        self.action_cls: Optional[type] = None
        self.observation_cls: Optional[type] = None
        self.state_cls: type = State
        self.mcp = False
        self.observation_objects: list[Observation] = []
        self.state_objects: list[State] = []
        self.unused: Optional[_Instance] = None

    @staticmethod
    def target(source: Any) -> str:
        return type(source).__name__ if isinstance(source, Environment) else factory_name(source)

    async def open(self) -> _Instance:
        if self.unused is not None:  # built by preflight for the metadata and the tools
            inst, self.unused = self.unused, None
            return inst
        if self.instance_given and self.instances:
            raise Unavailable("an instance was given, not a class or a factory")
        if self.instance_given:
            env = self.source
        else:
            env = await asyncio.get_running_loop().run_in_executor(self.executor, self.source)
        inst = _Instance(self, env)
        self.instances.append(inst)
        context = session_context_of(env) if isinstance(env, Environment) else None
        if context is not None:
            await inst.stack.enter_async_context(context)
        return inst

    def wire(self, obs: Any, method: str) -> dict[str, Any]:
        """`obs` as a client receives it; what a server would refuse raises `WireError`."""
        if self.observation_cls is None and isinstance(obs, Observation):
            self.observation_cls = type(obs)  # none declared: the first one sets the type
        declared = self.observation_cls.__name__ if self.observation_cls else "Observation"
        if not isinstance(obs, Observation):
            raise WireError(
                f"{method}() returned {type(obs).__name__} ({short(obs, 60)}), expected an "
                f"Observation ({declared}); served, this call fails with EXECUTION_ERROR"
            )
        allowed: tuple[type, ...] = (self.observation_cls or Observation,)
        if self.mcp:
            from openenv.core.env_server.mcp_types import CallToolObservation, ListToolsObservation

            allowed = (Observation,) if method == "reset" else (*allowed, CallToolObservation)
            allowed = (*allowed, ListToolsObservation)
        if not isinstance(obs, allowed):
            raise WireError(
                f"{method}() returned {type(obs).__name__}, which is not a {declared} (the "
                "declared observation type, which typed clients parse observations into)"
            )
        try:
            payload = loads(dumps(serialize_observation(obs)))
        except (TypeError, orjson.JSONEncodeError) as exc:
            bad = unserializable_fields(obs)
            fields = f"field {', '.join(bad)}" if bad else str(exc)
            raise WireError(
                f"{type(obs).__name__} is not JSON serializable: {fields} (served, the reply fails)"
            ) from exc
        self.observation_objects.append(obs)
        return flat_observation(payload)

    # -- before the shared checks: construct and types --------------------------------------

    async def preflight(self, checker: Checker) -> bool:
        try:
            first = await self.open()
        except Exception as exc:
            checker.add("construct", False, f"building the environment raised {_exc(exc)}")
            return False
        if not isinstance(first.env, Environment):
            what = type(first.env).__name__
            detail = f"the factory returned {what}, not an openenv.core.env_server.Environment"
            checker.add("construct", False, detail)
            return False
        checker.add("construct", True, f"built {type(first.env).__name__}")
        self.unused = first
        self.env_cls = type(first.env)
        from openenv.core.env_server.mcp_environment import MCPEnvironment

        self.mcp = isinstance(first.env, MCPEnvironment)
        self._check_types(checker)
        return True

    def _check_types(self, checker: Checker) -> None:
        declared = declared_types(self.env_cls)
        action_cls, obs_cls, state_cls = (g or d for g, d in zip(self.given, declared, strict=True))
        samples = checker.given_samples
        if action_cls is None and samples and isinstance(samples[0], Action):
            action_cls = type(samples[0])
        if self.mcp:
            from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation

            # Served, an MCP environment publishes the tool-call types, whatever it declares.
            action_cls = self.given[0] or CallToolAction
            obs_cls = self.given[1] or CallToolObservation
        problems = []
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
        ok = not problems
        self.action_cls = action_cls if ok or _proper_subclass(action_cls, Action) else None
        self.observation_cls = obs_cls if ok or _proper_subclass(obs_cls, Observation) else None
        self.state_cls = state_cls if state_cls and _proper_subclass(state_cls, State) else State
        if problems:
            checker.add("types", False, "; ".join(problems))
            return
        inferred = "" if obs_cls else " (no observation type declared: taken from reset())"
        detail = f"action {action_cls.__name__}, observation "  # type: ignore[union-attr]
        detail += f"{getattr(obs_cls, '__name__', '?')}, state {self.state_cls.__name__}{inferred}"
        checker.add("types", True, detail)

    async def metadata(self) -> dict[str, Any]:
        env = self.instances[0].env
        return (await self.instances[0]._sync(env.get_metadata)).model_dump()

    async def schemas(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        classes: tuple[tuple[str, Any], ...] = (
            ("action", self.action_cls),
            ("observation", self.observation_cls),
            ("state", self.state_cls),
        )
        for key, cls in classes:
            if cls is not None:
                try:
                    out[key] = json.loads(json.dumps(cls.model_json_schema(), allow_nan=False))
                except Exception as exc:
                    raise RuntimeError(f"the {key} schema of {cls.__name__}: {_exc(exc)}") from exc
        return out

    async def tools(self) -> Optional[list[dict[str, Any]]]:
        if not self.mcp:
            return None
        tools = await self.instances[0].env.list_tools()
        return [{"name": t.name, "inputSchema": t.input_schema} for t in tools]

    def isolation(self) -> tuple[Optional[Severity], str]:
        if bool(getattr(self.env_cls, "SUPPORTS_CONCURRENT_SESSIONS", False)):
            return "error", ""
        return "warning", (
            " (SUPPORTS_CONCURRENT_SESSIONS is False, so the server runs one session at a "
            "time, but /metadata and stateless HTTP calls still build extra instances)"
        )

    async def refusals(self, payload: dict[str, Any], field_name: str) -> list[str]:
        return []

    # -- after the shared checks: round trips of the Python objects, close -------------------

    async def postflight(self, checker: Checker, run: Episode) -> None:
        self._roundtrips(checker)
        if self.instance_given:
            checker.add("close", True, "skipped: an instance was given", skipped=True)
            return
        problems = []
        try:
            await self.open()  # closed without ever being reset
        except Exception as exc:
            problems.append(f"building an instance to close raised {_exc(exc)}")
        for i, inst in enumerate(self.instances):
            try:
                await inst.close()
            except Exception as exc:
                label = "an instance never reset" if i == len(self.instances) - 1 else "an instance"
                problems.append(f"close() of {label} raised {_exc(exc)}")
        if problems:
            checker.add("close", False, "; ".join(problems))
        else:
            checker.add("close", True, f"close() works on {len(self.instances)} instances")

    def _roundtrips(self, checker: Checker) -> None:
        """Observations, sample actions and states parse back from their JSON unchanged."""
        action_cls = self.action_cls or Action
        actions = []
        for payload in {json.dumps(a, sort_keys=True): a for a in checker.actions}.values():
            with contextlib.suppress(Exception):  # an action that does not parse fails `step`
                actions.append(deserialize_action(payload, action_cls))
        for name, objects, parse in (
            (
                "observation_roundtrip",
                self.observation_objects,
                lambda o: type(o).model_validate(
                    flat_observation(loads(dumps(serialize_observation(o))))
                ),
            ),
            (
                "action_roundtrip",
                actions,
                lambda a: deserialize_action(loads(dumps(a.model_dump(mode="json"))), action_cls),
            ),
            (
                "state_roundtrip",
                self.state_objects,
                lambda s: type(s).model_validate(loads(dumps(s.model_dump()))),
            ),
        ):
            if not objects:
                checker.skip(name, "nothing to check")
                continue
            problems: list[str] = []
            for obj in objects:
                try:
                    back = parse(obj)
                except ValidationError as exc:
                    problem = (
                        f"{type(obj).__name__} does not parse back: {_validation_summary(exc)}"
                    )
                except Exception as exc:
                    problem = f"{type(obj).__name__} does not survive JSON: {_exc(exc)}"
                else:
                    diff = first_difference(normalize(obj), normalize(back))
                    if type(back) is not type(obj):
                        diff = f"it parses back as {type(back).__name__}"
                    problem = (
                        f"{type(obj).__name__} changes in a JSON round trip: {diff}" if diff else ""
                    )
                if problem and problem not in problems:
                    problems.append(problem)
            kinds = ", ".join(sorted({type(o).__name__ for o in objects}))
            if problems:
                checker.add(name, False, "; ".join(problems[:3]))
            else:
                checker.add(name, True, f"{len(objects)} {kinds} parse back from JSON unchanged")

    async def aclose(self) -> None:
        for inst in self.instances:
            if not self.instance_given:
                with contextlib.suppress(Exception):
                    await inst.close()
        self.executor.shutdown(wait=False)


# -- over a URL --------------------------------------------------------------------------------


class _Client:
    """One `/ws` session of a running server."""

    def __init__(self, client: GenericEnvClient) -> None:
        self.client = client

    async def _call(self, work: Any) -> Any:
        try:
            return await work
        except ServerError as exc:
            raise WireError(exc.message, exc.code, exc.data) from exc
        except Exception as exc:
            raise WireError(_exc(exc), "TRANSPORT") from exc

    async def reset(self, seed: int) -> dict[str, Any]:
        return _from_result(await self._call(self.client.reset(seed=seed)))

    async def step(self, action: dict[str, Any]) -> dict[str, Any]:
        return _from_result(await self._call(self.client.step(action)))

    async def state(self) -> dict[str, Any]:
        return await self._call(self.client.state())

    async def close(self) -> None:
        await self.client.close()


def _from_result(result: Any) -> dict[str, Any]:
    obs = dict(result.observation) if isinstance(result.observation, dict) else {}
    return {**obs, "reward": result.reward, "done": result.done, "metadata": result.metadata}


class UrlDriver:
    """Drives a running server: `/ws` sessions, plus its HTTP endpoints and transport."""

    def __init__(self, base_url: str, timeout_s: float, headers: Optional[dict[str, str]]) -> None:
        self.base = convert_to_http_url(base_url).rstrip("/")
        self.timeout_s = timeout_s
        self.headers = dict(headers or {})
        self.http = httpx.AsyncClient(base_url=self.base, timeout=timeout_s, headers=self.headers)
        self.clients: list[GenericEnvClient] = []
        self.post_tools: Optional[list[dict[str, Any]]] = None
        self.capacity: Optional[dict[str, Any]] = None
        self.mode: Optional[str] = None

    async def _get(self, path: str) -> tuple[int, Any]:
        response = await self.http.get(path)
        try:
            return response.status_code, response.json()
        except ValueError:
            return response.status_code, response.text

    async def _json(self, path: str) -> dict[str, Any]:
        status, body = await self._get(path)
        if status != 200 or not isinstance(body, dict):
            raise RuntimeError(f"GET {path} -> {status} {short(body, 200)}")
        return body

    async def open(self) -> _Client:
        client = GenericEnvClient(
            self.base,
            connect_timeout_s=self.timeout_s,
            message_timeout_s=self.timeout_s,
            headers=self.headers,
            resume=False,
        )
        self.clients.append(client)
        return _Client(client)

    # -- before the shared checks: OpenEnv's endpoint criteria -----------------------------

    async def preflight(self, checker: Checker) -> bool:
        report = checker.report
        try:
            status, body = await self._get("/health")
        except httpx.HTTPError as exc:
            report.unreachable = f"nothing answers at {self.base} ({_exc(exc)})"
            checker.add("health_endpoint", False, report.unreachable + "; no other check was run")
            return False
        state = body.get("status") if isinstance(body, dict) else None
        checker.add(
            "health_endpoint",
            status == 200 and state == "healthy",
            f"GET /health -> {status} {short(body, 200)}",
            expected={"status_code": 200, "status": "healthy"},
            actual={"status_code": status, "status": state},
        )
        await checker.guard("openapi_version_available", self._check_openapi, checker)
        await checker.guard("mcp_endpoint", self._check_mcp_endpoint, checker)
        with contextlib.suppress(Exception):
            self.capacity = await self._json("/capacity")
        return True

    async def _check_openapi(self, checker: Checker) -> None:
        status, body = await self._get("/openapi.json")
        info = body.get("info") if isinstance(body, dict) else None
        version = info.get("version") if isinstance(info, dict) else None
        ok = status == 200 and isinstance(version, str) and version.startswith("1.")
        detail = f"GET /openapi.json -> {status}, info.version {version!r}"
        if not ok:
            detail += "; OpenEnv clients and tools speak protocol version 1.x"
        elif checker.report.kind == "running_environment":  # a folder's standard stays local
            checker.report.standard_version = version  # type: ignore[assignment]
            checker.report.standard_profile = f"openenv-http/{version.split('.')[0]}.x"  # type: ignore[union-attr]
        checker.add("openapi_version_available", ok, detail, actual={"version": version})
        paths = body.get("paths") if isinstance(body, dict) else None
        if not isinstance(paths, dict):
            detail = "no OpenAPI paths to read the mode from (see openapi_version_available)"
            checker.add("mode_endpoint_consistency", False, detail)
            return
        self.mode, ok, detail, expected, present = mode_of(paths)
        checker.report.mode = self.mode
        checker.add(
            "mode_endpoint_consistency",
            ok,
            detail,
            expected={"mode": self.mode, "paths": expected},
            actual={"mode": self.mode, "paths": present},
        )

    async def _check_mcp_endpoint(self, checker: Checker) -> None:
        rpc = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        response = await self.http.post("/mcp", json=rpc)
        try:
            reply = response.json()
        except ValueError:
            reply = response.text
        version = reply.get("jsonrpc") if isinstance(reply, dict) else None
        ok = response.status_code == 200 and version == "2.0"
        result = reply.get("result") if isinstance(reply, dict) else None
        tools = result.get("tools") if isinstance(result, dict) else None
        if isinstance(tools, list):
            self.post_tools = [t for t in tools if isinstance(t, dict)]
        detail = f"POST /mcp tools/list -> {response.status_code} "
        detail += f"({len(tools)} tools)" if isinstance(tools, list) else short(reply, 200)
        checker.add("mcp_endpoint", ok, detail, actual={"jsonrpc": version})

    async def metadata(self) -> dict[str, Any]:
        return await self._json("/metadata")

    async def schemas(self) -> dict[str, Any]:
        return await self._json("/schema")

    async def tools(self) -> Optional[list[dict[str, Any]]]:
        if self.post_tools is None:
            return None
        session = await self.open()
        try:
            reply = await session.client.mcp_request("tools/list")
        finally:
            await session.close()
        ws_tools = (reply.get("result") or {}).get("tools") if isinstance(reply, dict) else None
        names = sorted(str(t.get("name")) for t in self.post_tools)
        ws_names = sorted(str(t.get("name")) for t in ws_tools or [])
        if ws_names != names:
            raise RuntimeError(f"/ws tools/list gives {ws_names}, POST /mcp {names}")
        return self.post_tools

    def isolation(self) -> tuple[Optional[Severity], str]:
        max_sessions = (self.capacity or {}).get("max_sessions")
        if isinstance(max_sessions, int) and max_sessions < 2:
            return None, f"the server serves one session at a time (max_sessions={max_sessions})"
        return "error", ", yet the environment declares SUPPORTS_CONCURRENT_SESSIONS"

    async def refusals(self, payload: dict[str, Any], field_name: str) -> list[str]:
        """The same action over HTTP must be a 422 naming the field."""
        if self.mode == "production":
            return ["ok: no HTTP /step (production mode)"]
        response = await self.http.post("/step", json={"action": payload})
        try:
            detail = response.json().get("detail")
        except (ValueError, AttributeError):
            detail = response.text
        if response.status_code != 422:
            return [f"POST /step answered {response.status_code}, not 422"]
        errors = detail.get("errors") if isinstance(detail, dict) else detail
        if not names_field(field_name, errors, detail):
            return [f"POST /step 422 does not name {field_name!r}: {short(detail)}"]
        return ["ok: POST /step 422"]

    # -- after the shared checks: the HTTP transport and session release ----------------------

    async def postflight(self, checker: Checker, run: Episode) -> None:
        for client in self.clients:  # a one-session server needs the /ws sessions gone
            with contextlib.suppress(Exception):
                await client.close()
        if self.mode == "production":
            for name in ("http_session", "http_stateless"):
                checker.skip(name, "production mode: no HTTP /reset, /step, /state")
        else:
            await checker.guard("http_session", self._check_http_session, checker, run)
            await checker.guard("http_stateless", self._check_http_stateless, checker)
        await checker.guard("sessions_released", self._check_released, checker)

    async def _check_http_session(self, checker: Checker, ws_run: Episode) -> None:
        http, problems = self.http, []
        response = await http.post(
            "/reset", json={"seed": checker.seed}, headers={SESSION_HEADER: NEW_SESSION}
        )
        body = response.json()
        sid = body.get("session_id") if isinstance(body, dict) else None
        if response.status_code != 200 or not sid or response.headers.get(SESSION_HEADER) != sid:
            detail = f"POST /reset with {SESSION_HEADER}: new -> {response.status_code} "
            detail += f"{short(body, 200)}; the session id must be in the body and the header"
            checker.add("http_session", False, detail)
            return
        headers = {SESSION_HEADER: sid}
        observations = [flat_observation(body)]
        checker.observations.append(("http reset", observations[0], True))
        try:
            for i, action in enumerate(checker.actions[: checker.steps]):
                response = await http.post("/step", json={"action": action}, headers=headers)
                if response.status_code != 200:
                    problems.append(
                        f"POST /step #{i} -> {response.status_code} {short(response.text, 200)}"
                    )
                    break
                observations.append(flat_observation(response.json()))
                checker.observations.append((f"http step #{i}", observations[-1], False))
                if observations[-1].get("done"):
                    break
            response = await http.get("/state", headers=headers)
            if response.status_code == 200:
                checker.states.append(("http", response.json()))
            else:
                problems.append(f"GET /state in the session -> {response.status_code}")
        finally:
            closed = await http.delete(f"/sessions/{sid}")
        if closed.status_code != 200:
            problems.append(f"DELETE /sessions/{{id}} -> {closed.status_code}")
        response = await http.get("/state", headers=headers)
        if response.status_code != 404:
            problems.append(f"GET /state of the closed session -> {response.status_code}, not 404")
        if problems:
            checker.add("http_session", False, "; ".join(problems))
            return
        detail = f"{SESSION_HEADER}: new opened a session; reset + {len(observations) - 1} steps"
        checker.add("http_session", True, detail + " + state; DELETE closed it (then 404)")
        if ws_run.reset is None:
            return
        ws_obs = [ws_run.reset, *ws_run.observations]
        volatile = checker.volatile_fields()
        for i, (a, b) in enumerate(zip(ws_obs, observations, strict=False)):
            diff = first_difference(
                without(normalize(a), *volatile), without(normalize(b), *volatile)
            )
            if diff:
                label = "reset" if i == 0 else f"step #{i - 1}"
                detail = f"the same seeded episode differs between /ws and HTTP at {label}: {diff}"
                checker.add("transport_consistency", False, detail, "warning")
                return
        detail = f"the seeded episode is identical over /ws and HTTP ({len(ws_obs)} observations)"
        checker.add("transport_consistency", True, detail, "warning")

    async def _check_http_stateless(self, checker: Checker) -> None:
        response = await self.http.post("/reset", json={"seed": checker.seed})
        body = response.json()
        ok = response.status_code == 200 and isinstance(body, dict) and "observation" in body
        checker.add(
            "http_stateless", ok, f"POST /reset -> {response.status_code} {short(body, 100)}"
        )

    async def _check_released(self, checker: Checker) -> None:
        if self.capacity is None:
            checker.skip("sessions_released", "no /capacity endpoint", "warning")
            return
        baseline, active = self.capacity.get("active_sessions", 0), None
        deadline = time.monotonic() + _RELEASE_WAIT_S
        while time.monotonic() < deadline:
            active = (await self._json("/capacity")).get("active_sessions")
            if isinstance(active, int) and active <= baseline:
                detail = f"every session the checker opened was released ({active} active)"
                checker.add("sessions_released", True, detail, "warning")
                return
            await asyncio.sleep(0.05)
        detail = f"active_sessions is {active} after the checker closed its sessions, {baseline} "
        checker.add("sessions_released", False, detail + "before", "warning")

    async def aclose(self) -> None:
        for client in self.clients:
            with contextlib.suppress(Exception):
                await client.close()
        await self.http.aclose()


def mode_of(paths: dict[str, Any]) -> tuple[str, bool, str, list[str], list[str]]:
    """`(mode, consistent, detail, expected, present)` from OpenAPI paths: simulation serves
    /reset, /step and /state over HTTP, production none of them."""
    present: list[str] = sorted(p for p in ("/reset", "/step", "/state") if p in paths)
    mode = "simulation" if "/reset" in paths else "production"
    expected = ["/reset", "/state", "/step"] if mode == "simulation" else []
    ok = present == expected
    detail = f"{mode} mode: HTTP routes {present or 'none'}"
    if not ok:
        detail += f"; expected {expected or 'none'} (a partial set confuses clients)"
    return mode, ok, detail, expected, present
