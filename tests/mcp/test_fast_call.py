"""The direct tool call of `MCPEnvironment` (mcp_fast_call.py) against `FastMCP.call_tool`.

Every case runs twice on fresh servers built the same way: once as the environment calls it (the
direct path where allowed) and once through `FastMCP.call_tool`, and the outcomes must match:
result type and fields, wire payload, exception type, error type and message, and what fastmcp
logged. Other tests check that the direct path is really taken where it may be, and that
whatever it cannot reproduce (user middleware, server or session visibility rules, auth, a
tracer, tools changed after the first call) goes through `call_tool`.

These run on every fastmcp series in `VERIFIED_SERIES`: in the project's venv on the locked one,
and in .ci/fastmcp-newest.sh on the newest that pyproject allows.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import re
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

import pytest
from fastmcp import Context, FastMCP
from fastmcp.dependencies import Shared
from fastmcp.exceptions import ToolError
from fastmcp.server.dependencies import get_context, get_server
from fastmcp.server.middleware import Middleware
from fastmcp.tools.base import ToolResult
from fastmcp.tools.function_tool import FunctionTool
from packaging.version import Version
from pydantic import BaseModel

from openenv.core.env_server import mcp_fast_call
from openenv.core.env_server.mcp_environment import (
    MCPEnvironment,
    ToolCallFailed,
    classify_tool_exception,
    tool_result_payload,
)
from openenv.core.env_server.mcp_fast_call import FastToolCaller, fast_path_supported


class Point(BaseModel):
    x: int
    y: int


def build_tools(mask_error_details: bool = False) -> FastMCP:
    mcp = FastMCP("cases", mask_error_details=mask_error_details)

    @mcp.tool
    async def echo(message: str) -> str:
        return message

    @mcp.tool
    def sync_add(a: int, b: int = 2) -> int:
        return a + b

    @mcp.tool
    async def as_dict(message: str) -> dict:
        return {"message": message, "length": len(message)}

    @mcp.tool
    async def as_model(x: int) -> Point:
        return Point(x=x, y=-x)

    @mcp.tool
    async def as_list(n: int) -> list[int]:
        return list(range(n))

    @mcp.tool
    async def nothing() -> None:
        return None

    @mcp.tool
    async def fails(message: str) -> str:
        raise ValueError(f"bad: {message}")

    @mcp.tool
    async def tool_error() -> str:
        raise ToolError("told the model so")

    @mcp.tool
    async def bump(ctx: Context) -> str:
        count = (await ctx.get_state("count") or 0) + 1
        await ctx.set_state("count", count)
        return str(count)

    @mcp.tool
    async def hide_echo(ctx: Context) -> str:
        await ctx.disable_components(names={"echo"})
        return "hidden"

    @mcp.tool
    async def hide_echo_quietly(ctx: Context) -> str:
        with contextlib.suppress(RuntimeError):  # the notification: no live MCP session
            await ctx.disable_components(names={"echo"})
        return "hidden"

    @mcp.tool
    async def looks_context_up() -> str:
        # No `Context` parameter: the body finds the context and the server all the same.
        ctx = get_context()
        count = (await ctx.get_state("looked_up") or 0) + 1
        await ctx.set_state("looked_up", count)
        return f"{ctx.fastmcp.name}/{get_server().name}/{count}"

    @mcp.tool
    async def with_shared(connection: dict = Shared(_open_connection)) -> str:
        return "connected" if connection["number"] else "not connected"

    @mcp.tool
    async def not_a_number() -> dict:
        # JSON has no NaN: fastmcp 4.1 writes null, 4.2 refuses the result.
        return {"value": float("nan")}

    @mcp.tool
    def sync_fails() -> int:
        raise RuntimeError("sync body failed")

    # Output schemas of tools must be objects when made; one changed afterwards declares
    # non-object structured content, which fastmcp 4.2's `Tool._run` marks.
    async def listed() -> ToolResult:
        return ToolResult(content="listed", structured_content={"items": [1, 2]})

    tool = FunctionTool.from_function(listed)
    tool.output_schema = {"type": "array", "items": {"type": "integer"}}
    mcp.add_tool(tool)
    return mcp


_connections_opened: list[int] = []


async def _open_connection() -> dict[str, int]:
    """A `Shared()` dependency: resolved in the `SharedContext` scope the call runs in."""
    _connections_opened.append(len(_connections_opened) + 1)
    return {"number": len(_connections_opened)}


class CasesEnvironment(MCPEnvironment):
    def __init__(self, server: FastMCP | None = None) -> None:
        super().__init__(server or build_tools())

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Any:
        return None

    @property
    def state(self) -> Any:
        return None


@pytest.fixture
def direct_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of the tools that ran on the direct path."""
    calls: list[str] = []
    original = FastToolCaller.call

    async def spy(self: FastToolCaller, tool: Any, name: str, arguments: dict[str, Any]) -> Any:
        try:
            result = await original(self, tool, name, arguments)
        except Exception:
            calls.append(name)
            raise
        if result is not None:
            calls.append(name)
        return result

    monkeypatch.setattr(FastToolCaller, "call", spy)
    return calls


async def _outcome(call: Callable[[], Any], name: str) -> tuple[Any, ...]:
    try:
        result = await call()
    except Exception as exc:
        failed = classify_tool_exception(name, exc)
        # What fastmcp raised: `call_tool_raw` raises its classification from it.
        raised = exc.__cause__ if isinstance(exc, ToolCallFailed) else exc
        assert raised is not None
        cause = raised.__cause__
        return (
            "error",
            failed.error_type,
            failed.message,
            (type(raised), str(raised), type(cause), str(cause)),
        )
    return ("ok", tool_result_payload(result), type(result), result.model_dump())


async def env_outcome(env: MCPEnvironment, name: str, arguments: dict[str, Any]) -> tuple:
    return await _outcome(lambda: env.call_tool_raw(name, arguments), name)


async def reference_outcome(env: MCPEnvironment, name: str, arguments: dict[str, Any]) -> tuple:
    """What `call_tool_raw` answered before the direct path: `FastMCP.call_tool`, classified."""
    from openenv.core.env_server.mcp_environment import _state_session

    assert _state_session is not None
    token = _state_session.set(env._tool_state_session)
    try:
        return await _outcome(lambda: env.mcp_server.call_tool(name, arguments), name)
    finally:
        _state_session.reset(token)


CASES: list[tuple[str, dict[str, Any]]] = [
    ("echo", {"message": "hi"}),
    ("echo", {"message": "ünï ✓"}),
    ("echo", {"message": "\ud800 lone surrogate"}),  # 4.1 sends it, 4.2 refuses it
    ("echo", {"message": 3}),  # coerced or refused exactly as call_tool does
    ("echo", {}),
    ("echo", {"message": "hi", "extra": 1}),
    ("sync_add", {"a": 1}),
    ("sync_add", {"a": "x"}),
    ("as_dict", {"message": "four"}),
    ("as_model", {"x": 5}),
    ("as_list", {"n": 3}),
    ("nothing", {}),
    ("fails", {"message": "m"}),
    ("tool_error", {}),
    ("hide_echo", {}),
    ("looks_context_up", {}),
    ("with_shared", {}),
    ("not_a_number", {}),
    ("sync_fails", {}),
    ("listed", {}),
    ("missing_tool", {}),
]


def _fastmcp_logs(caplog: pytest.LogCaptureFixture) -> list[tuple[str, int, str, bool]]:
    logs = [
        (r.name, r.levelno, r.getMessage(), r.exc_info is not None)
        for r in caplog.records
        if r.name.startswith("fastmcp")
    ]
    caplog.clear()
    return logs


@pytest.mark.parametrize("mask", [False, True], ids=["details", "masked"])
@pytest.mark.parametrize(
    ("name", "arguments"), CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)]
)
async def test_direct_path_answers_as_call_tool_does(
    name: str,
    arguments: dict[str, Any],
    mask: bool,
    direct_calls: list[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="fastmcp")
    direct_env, reference_env = (
        CasesEnvironment(build_tools(mask)),
        CasesEnvironment(build_tools(mask)),
    )
    caplog.clear()
    direct = await env_outcome(direct_env, name, arguments)
    direct_logs = _fastmcp_logs(caplog)
    reference = await reference_outcome(reference_env, name, arguments)
    assert direct == reference
    assert direct_logs == _fastmcp_logs(caplog)
    # Every known tool ran on the direct path (a failing tool included); unknown ones did not.
    assert direct_calls == ([] if name == "missing_tool" else [name])


async def test_ctx_state_is_per_environment_on_the_direct_path(direct_calls: list[str]) -> None:
    one, two = CasesEnvironment(), CasesEnvironment()
    answers = [await env_outcome(env, "bump", {}) for env in (one, one, two, one)]
    assert [a[1]["data"] for a in answers] == ["1", "2", "1", "3"]
    assert direct_calls == ["bump"] * 4
    # `ctx.set_state` made the store during a call; the next call watched it, found no rules.
    rules = one.__dict__["_fast_caller"]._rules
    assert one.mcp_server._FastMCP__state_store is not None
    assert (rules.possible, rules.unwatched) == (False, False)


async def test_session_visibility_rules_are_kept(direct_calls: list[str]) -> None:
    # `ctx.disable_components` stores the session's rule, then fails to notify (no live MCP
    # session in process); the rule holds all the same, on both paths.
    async def run(env: MCPEnvironment, outcome: Any) -> list[tuple]:
        return [
            await outcome(env, "echo", {"message": "a"}),
            await outcome(env, "hide_echo_quietly", {}),
            await outcome(env, "echo", {"message": "a"}),
            await outcome(CasesEnvironment(env.mcp_server), "echo", {"message": "a"}),
        ]

    direct = await run(CasesEnvironment(), env_outcome)
    assert [d[0] for d in direct] == ["ok", "ok", "error", "ok"]
    assert direct[2][1] == "tool_not_found"
    assert direct == await run(CasesEnvironment(), reference_outcome)
    # The hidden call went through call_tool (session rules on); the other session's did not.
    assert direct_calls == ["echo", "hide_echo_quietly", "echo"]


async def test_server_disable_and_enable_take_effect_at_the_next_call(
    direct_calls: list[str],
) -> None:
    server = build_tools()
    env = CasesEnvironment(server)
    assert (await env_outcome(env, "echo", {"message": "a"}))[0] == "ok"
    server.disable(names={"echo"})
    assert (await env_outcome(env, "echo", {"message": "a"}))[:2] == ("error", "tool_not_found")
    server.enable(names={"echo"})
    assert (await env_outcome(env, "echo", {"message": "b"}))[1]["data"] == "b"
    # With visibility transforms on the server, calls go through call_tool.
    assert direct_calls == ["echo"]


async def test_tools_added_removed_or_replaced_later_are_seen(direct_calls: list[str]) -> None:
    server = build_tools()
    env = CasesEnvironment(server)
    assert (await env_outcome(env, "echo", {"message": "a"}))[1]["data"] == "a"

    @server.tool
    async def late(n: int) -> int:
        return n * 10

    assert (await env_outcome(env, "late", {"n": 2}))[1]["data"] == 20
    server.local_provider.remove_tool("echo")
    assert (await env_outcome(env, "echo", {"message": "a"}))[:2] == ("error", "tool_not_found")

    @server.tool(name="echo")
    async def shout(message: str) -> str:
        return message.upper()

    assert (await env_outcome(env, "echo", {"message": "a"}))[1]["data"] == "A"
    assert direct_calls == ["echo", "late", "echo"]


class Recorder(Middleware):
    def __init__(self) -> None:
        self.seen: list[str] = []

    async def on_call_tool(self, context: Any, call_next: Any) -> Any:
        self.seen.append(context.message.name)
        return await call_next(context)


async def test_user_middleware_sees_every_call(direct_calls: list[str]) -> None:
    server = build_tools()
    env = CasesEnvironment(server)
    await env_outcome(env, "echo", {"message": "a"})
    recorder = Recorder()
    server.add_middleware(recorder)
    await env_outcome(env, "echo", {"message": "b"})
    await env_outcome(env, "fails", {"message": "c"})
    assert recorder.seen == ["echo", "fails"]
    assert direct_calls == ["echo"]


async def test_tools_with_auth_go_through_call_tool(direct_calls: list[str]) -> None:
    server = build_tools()

    def allow_all(ctx: Any) -> bool:
        return True

    @server.tool(auth=allow_all)
    async def guarded() -> str:
        return "in"

    env = CasesEnvironment(server)
    assert (await env_outcome(env, "guarded", {}))[1]["data"] == "in"
    assert direct_calls == []


def _stand_in_tracer_provider() -> Any:
    """Stands in for an OpenTelemetry SDK provider (not installed here): a provider that is
    neither the proxy nor the no-op one, handing out no-op tracers."""
    from opentelemetry import trace

    class StandInProvider(trace.TracerProvider):
        def get_tracer(self, *args: Any, **kwargs: Any) -> Any:
            return trace.NoOpTracer()

    return StandInProvider()


async def test_an_installed_tracer_sends_calls_through_call_tool(
    direct_calls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry import trace

    env = CasesEnvironment()
    assert (await env_outcome(env, "echo", {"message": "a"}))[1]["data"] == "a"
    assert direct_calls == ["echo"]
    # A provider set in code after the first call (restored afterwards: it is set-once).
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", _stand_in_tracer_provider())
    assert (await env_outcome(env, "echo", {"message": "b"}))[1]["data"] == "b"
    assert direct_calls == ["echo"]


async def test_a_tracer_named_in_the_environment_later_sends_calls_through_call_tool(
    direct_calls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry import trace
    from opentelemetry.environment_variables import OTEL_PYTHON_TRACER_PROVIDER
    from opentelemetry.util._once import Once

    env = CasesEnvironment()
    loaded: list[str] = []

    def load(variable: str, kind: str) -> Any:  # OpenTelemetry's entry-point loader
        loaded.append(variable)
        return _stand_in_tracer_provider()

    # The provider loaded from the variable is set globally once: restored afterwards.
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)
    monkeypatch.setattr(trace, "_TRACER_PROVIDER_SET_ONCE", Once())
    monkeypatch.setattr(trace, "_load_provider", load)
    await env.call_tool_raw("echo", {"message": "a"})
    assert direct_calls == ["echo"] and loaded == []
    monkeypatch.setenv(OTEL_PYTHON_TRACER_PROVIDER, "stand_in")
    assert (await env_outcome(env, "echo", {"message": "b"}))[1]["data"] == "b"
    assert direct_calls == ["echo"]
    assert loaded and loaded[0] == OTEL_PYTHON_TRACER_PROVIDER


async def test_timeouts_still_apply_on_the_direct_path(direct_calls: list[str]) -> None:
    server = build_tools()

    @server.tool
    async def slow() -> str:
        import asyncio

        await asyncio.sleep(5)
        return "late"

    env = CasesEnvironment(server)
    with pytest.raises(ToolCallFailed) as failed:
        await env.call_tool_raw("slow", {}, timeout_s=0.05)
    assert failed.value.error_type == "timeout"


# -- the fastmcp internals the direct path reads -------------------------------------------


def test_the_installed_fastmcp_is_a_verified_series() -> None:
    """Fails when the lock, or pyproject's range (.ci/fastmcp-newest.sh installs the newest it
    allows), moves fastmcp to a series these tests were not run against: check the direct path
    against its `call_tool`, then add the series to VERIFIED_SERIES."""
    assert version("fastmcp").startswith(mcp_fast_call.VERIFIED_SERIES)
    assert Version(version("fastmcp")) >= Version("4.1")
    assert fast_path_supported()


def test_pyproject_allows_only_verified_series() -> None:
    """pyproject's fastmcp range must end at a series the direct path was verified on, so that a
    later series cannot silently turn it off for pip users."""
    from pathlib import Path

    from packaging.requirements import Requirement

    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    dependencies = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    (fastmcp,) = [Requirement(d) for d in dependencies if Requirement(d).name == "fastmcp"]
    bounds = [s for s in fastmcp.specifier if s.operator == "<"]
    assert bounds, f"no upper bound on {fastmcp}"
    upper = min(Version(s.version) for s in bounds)
    newest = max(Version(s.rstrip(".")) for s in mcp_fast_call.VERIFIED_SERIES)
    assert upper <= Version(f"{newest.major}.{newest.minor + 1}"), (fastmcp, newest)
    for series in mcp_fast_call.VERIFIED_SERIES:
        assert fastmcp.specifier.contains(f"{series}0"), (fastmcp, series)


def test_an_unverified_fastmcp_warns_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(mcp_fast_call, "_VERIFIED", False)
    monkeypatch.setattr(mcp_fast_call, "_FASTMCP_VERSION", "9.9.0")
    monkeypatch.setattr(mcp_fast_call, "_refusal_logged", False)
    caplog.set_level(logging.WARNING, logger=mcp_fast_call.__name__)
    for _ in range(3):
        CasesEnvironment()
    assert not fast_path_supported()
    warnings = [r.getMessage() for r in caplog.records if r.name == mcp_fast_call.__name__]
    assert len(warnings) == 1, warnings
    assert "fast path is off" in warnings[0]
    assert "fastmcp 9.9.0 is not a series it was verified against" in warnings[0]


def test_a_verified_fastmcp_does_not_warn(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(mcp_fast_call, "_refusal_logged", False)
    caplog.set_level(logging.WARNING, logger=mcp_fast_call.__name__)
    CasesEnvironment()
    assert fast_path_supported()
    assert not [r for r in caplog.records if r.name == mcp_fast_call.__name__]


async def test_an_unverified_fastmcp_goes_through_call_tool(
    monkeypatch: pytest.MonkeyPatch, direct_calls: list[str]
) -> None:
    monkeypatch.setattr(mcp_fast_call, "_VERIFIED", False)
    monkeypatch.setattr(mcp_fast_call, "_refusal_logged", True)
    assert not fast_path_supported()
    env = CasesEnvironment()
    result = await env.call_tool_raw("sync_add", {"a": 2, "b": 3})
    assert direct_calls == []
    assert result.structured_content == {"result": 5}


def _flat(source: str) -> str:
    """Source without whitespace: needles match however fastmcp's formatter wraps lines."""
    return re.sub(r"\s+", "", source)


def _assert_contains(source: str, needles: tuple[str, ...]) -> None:
    flat = _flat(source)
    for needle in needles:
        assert _flat(needle) in flat, needle


def test_call_tool_core_is_still_what_the_direct_path_reproduces() -> None:
    """Fails when fastmcp changes the code the direct path mirrors: read mcp_fast_call.py's
    `FastToolCaller.call` and `_as_call_tool_raises` against the new `call_tool` before
    widening the pinned range."""
    call_tool = inspect.getsource(FastMCP.call_tool)
    get_tool = inspect.getsource(FastMCP.get_tool)
    needles = (
        "async with fastmcp.server.context.Context(fastmcp=self)",
        "self._compose_tool_call_interceptors(",
        # Only fastmcp's own wire handler marks a client call; ours never does, on either path.
        "with _dispatching_tool_call(), _extension_tool_call_scope(self):",
        "await self._rebind_prefab_tool_names(dispatched)",
        "tool: Tool | None = await self.get_tool(name, version=version)",
        "return await tool._run(arguments or {})",
        "except ValidationError as e:",
        "except FastMCPError as e:",
        "except PydanticValidationError as e:",
        "MISSING_REQUIRED_CLIENT_CAPABILITY",
        "if status_code == 429:",
        "if is_timeout_error(e):",
        "if self._mask_error_details:",
        'raise ToolError(f"Error calling tool {name!r}: {e}") from e',
    )
    _assert_contains(call_tool, needles)
    _assert_contains(
        get_tool,
        (
            "self._get_injected_tool(name)",
            "tool = await super().get_tool(name, version)",
            "tools = await apply_session_transforms([tool])",
            "is_enabled(tools[0]) and await _component_auth_allows(tools[0])",
            # A disabled (or, since 4.2, unauthorized) highest version: call_tool looks for
            # another, which the direct path leaves to it (it returns None or needs no auth).
            "if version is not None:",
        ),
    )


def test_tool_run_is_still_what_the_direct_path_reproduces() -> None:
    """`Tool._run`, which `call_tool` awaits: `run` alone (4.1), or `run` and then
    `_mark_non_object_result` (4.2), which the plan then applies too."""
    from fastmcp.tools.base import Tool

    run = _flat(inspect.getsource(Tool._run))
    plain = _flat("return await self.run(arguments)")
    marked = _flat("result = await self.run(arguments) return self._mark_non_object_result(result)")
    assert run.endswith(plain) or run.endswith(marked), run
    assert mcp_fast_call._MARKS_NON_OBJECT_RESULTS == run.endswith(marked)
    assert "_run" not in FunctionTool.__dict__ and "run" in FunctionTool.__dict__
    if mcp_fast_call._MARKS_NON_OBJECT_RESULTS:
        mark = inspect.getsource(Tool._mark_non_object_result)
        # A wrapped result (the text result the plan builds) comes back as it is.
        _assert_contains(
            mark,
            (
                'fastmcp_meta = result.meta.get("fastmcp") if result.meta else None',
                'if isinstance(fastmcp_meta, dict) and fastmcp_meta.get("wrap_result") is True:'
                " return result",
            ),
        )


def test_context_entry_is_still_what_the_direct_path_reproduces() -> None:
    """Fails when fastmcp changes what entering a `Context` sets up: `_ToolContext` sets the
    same for tools that inject nothing, less the `SharedContext` scope."""
    enter = inspect.getsource(Context.__aenter__)
    leave = inspect.getsource(Context.__aexit__)
    _assert_contains(
        enter,
        (
            "parent = _current_context.get(None)",
            "self._request_state = parent._request_state",
            "token = _current_context.set(self)",
            "self._server_token = _current_server.set(weakref.ref(self.fastmcp))",
            "SharedContext.resolved.get()",
            "self._shared_context = SharedContext()",
        ),
    )
    assert enter.count(".set(") == 2 and enter.count("await ") == 1
    assert leave.count(".reset(") == 2 and leave.count("await ") == 1


async def test_tools_that_inject_nothing_skip_only_the_shared_scope(
    direct_calls: list[str],
) -> None:
    env = CasesEnvironment()
    answers = [await env_outcome(env, "looks_context_up", {}) for _ in range(2)]
    assert [a[1]["data"] for a in answers] == ["cases/cases/1", "cases/cases/2"]
    plans = env.__dict__["_fast_caller"]._plans
    assert plans["looks_context_up"].injects_nothing
    # A tool with a dependency enters the whole `Context`: its `Shared()` value is resolved in
    # a scope of the call's own, as `call_tool` resolves it outside a server's lifespan.
    opened = len(_connections_opened)
    for _ in range(2):
        await env_outcome(env, "with_shared", {})
    assert not plans["with_shared"].injects_nothing
    assert len(_connections_opened) == opened + 2
    assert direct_calls == ["looks_context_up"] * 2 + ["with_shared"] * 2


def test_function_tool_run_is_still_what_the_direct_path_reproduces() -> None:
    """Fails when fastmcp changes `FunctionTool.run`, which `_FunctionToolPlan` mirrors with its
    per-call look-ups done once per tool."""
    from fastmcp.tools.function_tool import FunctionTool

    run = inspect.getsource(FunctionTool.run)
    needles = (
        "body_fn = _wrap_body_errors(self.fn, materialize_generators=True)",
        "body_fn, run_in_thread=self.run_in_thread",
        "exec_fn = _wrap_body_errors(wrapper_fn)",
        "type_adapter = get_cached_typeadapter(exec_fn)",
        "exec_is_async = is_coroutine_function(wrapper_fn)",
        "strict = _strict_input_validation()",
        "type_adapter, exec_is_async, arguments, strict=strict",
        "if isinstance(result, mcp_types.InputRequiredResult):",
        "return InputRequiredToolResult(result)",
        "return self.convert_result(result)",
    )
    _assert_contains(run, needles)
    assert run.count("await ") == 1  # nothing else awaited around the body


async def test_function_tools_run_on_their_looked_up_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    from fastmcp.tools.function_tool import FunctionTool

    def no_run(self: Any, arguments: dict[str, Any]) -> Any:
        raise AssertionError("FunctionTool.run called: the plan was not used")

    env = CasesEnvironment()
    await env.call_tool_raw("echo", {"message": "warm"})
    monkeypatch.setattr(FunctionTool, "run", no_run)
    for name, arguments in (("echo", {"message": "x"}), ("sync_add", {"a": 1}), ("bump", {})):
        result = await env.call_tool_raw(name, arguments)
        assert not result.is_error
    # A tool whose function was swapped after the plan was made runs as fastmcp runs it.
    tool = await env.mcp_server._local_provider.get_tool("echo")
    monkeypatch.undo()

    async def shout(message: str) -> str:
        return message.upper()

    tool.fn = shout
    assert (await env.call_tool_raw("echo", {"message": "y"})).structured_content == {"result": "Y"}


async def test_session_rules_are_skipped_only_on_a_store_watched_from_its_start() -> None:
    fresh = CasesEnvironment()
    assert fresh.__dict__["_fast_caller"]._rules.possible is False
    await env_outcome(fresh, "echo", {"message": "a"})
    await fresh.list_tools()
    # fastmcp makes its store at its first use (importing ~430 modules): not for these.
    assert fresh.mcp_server._FastMCP__state_store is None
    used = build_tools()
    assert used._state_store is not None  # made before any watch: it may hold rules already
    assert CasesEnvironment(used).__dict__["_fast_caller"]._rules.possible is True


async def test_rules_written_by_the_call_that_made_the_store_are_found() -> None:
    """fastmcp makes its state store at its first use: here inside a tool that also writes a
    session rule at once. The next call sees the new store, looks in it, and keeps the rule."""
    env = CasesEnvironment()
    assert env.mcp_server._FastMCP__state_store is None
    assert (await env_outcome(env, "hide_echo_quietly", {}))[0] == "ok"
    assert env.mcp_server._FastMCP__state_store is not None
    hidden = await env_outcome(env, "echo", {"message": "a"})
    assert hidden[:2] == ("error", "tool_not_found")
    assert env.__dict__["_fast_caller"]._rules.possible is True


# -- the text result of a `-> str` tool, built without `convert_result` ---------------------


class Shout(str):
    """A str subclass: its JSON form may differ from itself, so fastmcp converts it."""


async def test_text_results_equal_what_convert_result_builds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from fastmcp.tools.base import Tool

    server = build_tools()

    @server.tool
    async def anything(value: str, kind: str) -> str:
        return Shout(value) if kind == "subclass" else value  # type: ignore[return-value]

    env = CasesEnvironment(server)
    converted: list[Any] = []
    original = Tool.convert_result

    def spy(self: Any, raw: Any) -> Any:
        converted.append(raw)
        return original(self, raw)

    await env.call_tool_raw("anything", {"value": "warm", "kind": "str"})  # the plan is made
    tool = await server._local_provider.get_tool("anything")
    monkeypatch.setattr(Tool, "convert_result", spy)
    for text in ("hi", "", "ünïcödé ✓", '{"json": "text"}', "NaN Infinity", "x" * 10_000):
        result = await env.call_tool_raw("anything", {"value": text, "kind": "str"})
        expected = original(tool, text)
        assert result == expected
        assert type(result) is type(expected)
        assert result.model_fields_set == expected.model_fields_set
        assert result.__pydantic_private__ == expected.__pydantic_private__
        assert result.content[0].model_fields_set == expected.content[0].model_fields_set
        assert result.to_mcp_result() == expected.to_mcp_result()
    assert converted == []  # all of them built from the template
    # A str that is not valid UTF-8 goes through fastmcp's conversion (4.2 refuses it).
    surrogate = "\ud800 lone surrogate"
    try:
        expected = original(tool, surrogate)
    except ToolError as refused:
        with pytest.raises(ToolCallFailed) as failed:
            await env.call_tool_raw("anything", {"value": surrogate, "kind": "str"})
        assert str(refused) in failed.value.message
    else:
        result = await env.call_tool_raw("anything", {"value": surrogate, "kind": "str"})
        assert result == expected
    assert converted == [surrogate]
    converted.clear()
    # Anything but a plain str goes through fastmcp's conversion.
    result = await env.call_tool_raw("anything", {"value": "sub", "kind": "subclass"})
    assert converted and type(converted[-1]) is Shout
    assert result.structured_content == {"result": "sub"}


async def test_a_changed_output_schema_takes_convert_result_again() -> None:
    env = CasesEnvironment()
    assert (await env.call_tool_raw("echo", {"message": "a"})).structured_content == {"result": "a"}
    tool = await env.mcp_server._local_provider.get_tool("echo")
    tool.output_schema = None  # no structured content from now on
    result = await env.call_tool_raw("echo", {"message": "b"})
    assert result.structured_content is None
    assert result.content[0].text == "b"


def test_convert_result_still_makes_the_text_result_the_plan_copies() -> None:
    """Fails when fastmcp changes how `convert_result` handles a value: `_text_result_of`
    builds its result for a plain `str`; the plan also checks it on a template at start."""
    from fastmcp.tools.base import Tool, ToolResult

    convert = inspect.getsource(Tool.convert_result)
    needles = (
        "content = _convert_to_content(raw_value)",
        "structured = _serialize_to_jsonable(raw_value, self.return_type)",
        "content = _convert_to_content(structured)",
        'wrap_result = self.output_schema.get("x-fastmcp-wrap-result")',
        'structured_content={"result": structured} if wrap_result else structured,',
        'meta={"fastmcp": {"wrap_result": True}} if wrap_result else None,',
    )
    _assert_contains(convert, needles)
    init = inspect.getsource(ToolResult.__init__)
    assert "structured_content = _serialize_to_jsonable(structured_content)" in init
