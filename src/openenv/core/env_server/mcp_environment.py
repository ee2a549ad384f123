"""`MCPEnvironment`: an environment whose actions are MCP tool calls, backed by fastmcp.

Tools are called in-process on the FastMCP server (no client transport), so failures keep
their exception types and are classified by type: `tool_not_found`, `invalid_args`,
`execution_error`, `timeout`. The same `list_tools` / `call_tool` serve every path (Gym-style
steps, JSON-RPC `/mcp`, real MCP, `{"type":"mcp"}` over `/ws`), so mode-specific tools are visible
on all of them. Code mode (`ExecuteCodeAction`, `execute_code()`) runs Python in a sandbox with
the tools as functions (see `code_mode.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import sys
import uuid
import weakref
from collections.abc import AsyncIterator, Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import pydantic
from fastmcp import FastMCP
from fastmcp.exceptions import NotFoundError, ToolError
from fastmcp.exceptions import ValidationError as ToolValidationError
from fastmcp.tools import FunctionTool

from ...core.utils import run_coroutine_sync
from ...sandbox import Sandbox, SandboxError
from ..errors import InvalidActionError
from .call_deadlines import start_deadline
from .code_mode import CodeModeLimits, compat_metadata, run_code
from .interfaces import Environment, Transform
from .mcp_fast_call import FastToolCaller
from .mcp_types import (
    RESERVED_TOOL_NAMES,
    CallToolAction,
    CallToolObservation,
    ExecuteCodeAction,
    ExecuteCodeObservation,
    ListToolsAction,
    ListToolsObservation,
    Tool,
    ToolErrorType,
    call_tool_result_wire,
)
from .mcp_types import (
    ToolError as ToolErrorModel,
)
from .types import Action, Observation

if TYPE_CHECKING:
    from fastmcp.client.client import CallToolResult

try:  # fastmcp >= 3
    from fastmcp.exceptions import DisabledError
except ImportError:  # pragma: no cover
    DisabledError = NotFoundError  # type: ignore[misc,assignment]

_state_session: ContextVar[str | None] | None
try:  # fastmcp >= 4.1: the session id a call without a live MCP session runs under
    from fastmcp.server.dependencies import _background_task_session_id as _state_session
except ImportError:  # pragma: no cover (older fastmcp: ctx state needs a live MCP session)
    _state_session = None

#: Seconds a tool call may take when the caller gives no timeout.
MCP_TOOL_CALL_TIMEOUT = 30.0
_MODES = ("simulation", "production")

#: Tool-call time limits share one timer per loop (see call_deadlines.py); Python 3.10 has no
#: `Task.uncancel` to tell our cancellation from another, so it keeps `asyncio.wait_for`.
_SHARED_DEADLINES = sys.version_info >= (3, 11)


class ToolCallFailed(Exception):
    """A classified tool failure (the observation's `error`)."""

    def __init__(self, error_type: ToolErrorType, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.message = message


def classify_tool_exception(name: str, exc: BaseException) -> ToolCallFailed:
    """Map an in-process fastmcp exception to a tool error type, by exception class."""
    if isinstance(exc, ToolCallFailed):
        return exc
    if isinstance(exc, (NotFoundError, DisabledError)):
        return ToolCallFailed(ToolErrorType.TOOL_NOT_FOUND, f"Unknown tool: '{name}'")
    if isinstance(exc, (ToolValidationError, pydantic.ValidationError)):
        cause = exc if isinstance(exc, pydantic.ValidationError) else exc.__cause__
        detail = str(exc)
        if isinstance(cause, pydantic.ValidationError):
            detail = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
                for e in cause.errors(include_url=False)
            )
        return ToolCallFailed(
            ToolErrorType.INVALID_ARGS, f"Invalid arguments for '{name}': {detail}"
        )
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        return ToolCallFailed(ToolErrorType.TIMEOUT, f"Tool '{name}' timed out")
    if isinstance(exc, ToolError):
        cause = exc.__cause__
        error = getattr(cause, "error", None)
        if (
            cause is not None
            and getattr(error, "code", None) == -32000
            and "timed out" in str(cause)
        ):
            return ToolCallFailed(ToolErrorType.TIMEOUT, f"Tool '{name}' timed out: {cause}")
        return ToolCallFailed(ToolErrorType.EXECUTION_ERROR, str(exc))
    return ToolCallFailed(ToolErrorType.EXECUTION_ERROR, f"Tool '{name}' failed: {exc}")


def tool_data(result: Any) -> Any:
    """The tool's value, as fastmcp's client reads it: the unwrapped `result` of a wrapped
    value, else the structured content, else the text of a single text block."""
    structured = getattr(result, "structured_content", None)
    meta = getattr(result, "meta", None)
    content = getattr(result, "content", None) or []
    if isinstance(structured, dict) and (meta or {}).get("fastmcp", {}).get("wrap_result"):
        return structured.get("result")
    if structured is not None:
        return structured
    if len(content) == 1 and getattr(content[0], "type", None) == "text":
        return getattr(content[0], "text", None)
    return None


def tool_call_result(result: Any) -> CallToolResult:
    """A fastmcp ToolResult (server side) as fastmcp's client-side `CallToolResult`, the type
    OpenEnv's in-process steps return."""
    return _call_tool_result_type()(
        content=list(getattr(result, "content", None) or []),
        structured_content=getattr(result, "structured_content", None),
        meta=getattr(result, "meta", None),
        data=tool_data(result),
        is_error=bool(getattr(result, "is_error", False)),
    )


@functools.cache
def _call_tool_result_type() -> type[CallToolResult]:
    """Imported at the first tool call, not with the server: fastmcp's client package (its auth
    helpers: key_value, beartype) is ~200 ms of CPU that /health need not wait for; looked up
    once, not per call (an import statement is ~0.3 µs)."""
    from fastmcp.client.client import CallToolResult

    return CallToolResult


def tool_result_payload(result: Any) -> dict[str, Any]:
    """A fastmcp ToolResult as OpenEnv clients read it (snake case, unwrapped `data`)."""
    return call_tool_result_wire(tool_call_result(result))


def tool_result_mcp(result: Any) -> dict[str, Any]:
    """A fastmcp ToolResult as the MCP specification shapes it (camel case)."""
    out: dict[str, Any] = {
        "content": [
            block.model_dump(mode="json", by_alias=True, exclude_none=True)
            for block in getattr(result, "content", []) or []
        ],
        "isError": bool(getattr(result, "is_error", False)),
    }
    structured = getattr(result, "structured_content", None)
    if structured is not None:
        out["structuredContent"] = structured
    return out


def _refuse_reserved_names(names: set[str]) -> None:
    clash = sorted(names & RESERVED_TOOL_NAMES)
    if clash:
        raise ValueError(
            f"MCP tools named {clash} clash with the environment's own operations "
            f"({', '.join(sorted(RESERVED_TOOL_NAMES))}); give the tools other names"
        )


class _ClientHold:
    """A server's hold on one session's in-process client, as an async context: the client joins
    it at its first entry on the server's loop and is let go when the session ends (a use from
    another loop, e.g. a sync step's, connects only for itself). Light, since every MCP session
    holds one: no exit stack until the client joins."""

    __slots__ = ("_env", "joined", "loop")

    def __init__(self, env: MCPEnvironment) -> None:
        self._env = env
        self.loop: asyncio.AbstractEventLoop | None = None
        self.joined: Any = None  # the client, once it joined

    async def __aenter__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._env.__dict__["_client_hold_now"] = self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._env.__dict__.get("_client_hold_now") is self:
            del self._env.__dict__["_client_hold_now"]
        client, self.joined = self.joined, None
        if client is not None:
            await client.__aexit__(None, None, None)

    async def join(self, client: Any) -> None:
        """Hold `client` connected until the session ends, if this is the server's loop."""
        if self.joined is None and self.loop is asyncio.get_running_loop():
            self.joined = client  # before entering: the entry below comes back here
            try:
                await client.connect_for_hold()
            except BaseException:
                self.joined = None
                raise


@functools.cache
def _held_client_type() -> type:
    """fastmcp's `Client`, entering its environment's session hold first; made on first use so
    that the client package (~200 ms of imports) loads only when a client is needed."""
    from fastmcp import Client

    class HeldClient(Client):
        _openenv_env: Callable[[], MCPEnvironment | None] | None = None

        async def __aenter__(self) -> Any:
            env = self._openenv_env() if self._openenv_env is not None else None
            hold = env.__dict__.get("_client_hold_now") if env is not None else None
            if hold is not None and env.__dict__.get("_mcp_client") is self:  # not a `.new()` copy
                await hold.join(self)
            return await super().__aenter__()

        async def connect_for_hold(self) -> Any:
            """The session hold's own entry (fastmcp's, without joining the hold again)."""
            return await super().__aenter__()

    return HeldClient


class MCPEnvironment(Environment):
    """Base class for tool environments. Subclasses implement `reset` and `state`.

    Non-MCP actions go to `_step_impl` (sync) or `_step_impl_async`. `ExecuteCodeAction` runs
    the agent's Python in a sandbox with the tools as functions; set `code_mode_enabled = False`
    to refuse it, and `code_mode_limits` to change its ceilings.
    """

    #: Whether `ExecuteCodeAction` (code mode) is accepted.
    code_mode_enabled: bool = True
    #: Ceilings of one code-mode execution.
    code_mode_limits: CodeModeLimits = CodeModeLimits()

    def __init__(
        self, mcp_server: FastMCP, transform: Transform | None = None, rubric: Any = None
    ) -> None:
        super().__init__(transform=transform, rubric=rubric)
        # Before the first listing: the direct tool call notes whether the server has a state
        # store yet, to watch the one fastmcp makes from its creation (see mcp_fast_call.py).
        self.__dict__["_fast_caller"] = FastToolCaller(mcp_server)
        _refuse_reserved_names({t.name for t in run_coroutine_sync(mcp_server.list_tools())})
        self.mcp_server = mcp_server
        self._mode: str | None = "simulation"
        self._mode_tools: dict[str, dict[str, FunctionTool]] = {}
        # Tools added after construction are checked at the first listing or call.
        self._reserved_checked = False
        #: The session that tools' `ctx.get_state` / `ctx.set_state` use: one per environment
        #: instance, which is one server session (HTTP, WebSocket or MCP).
        self._tool_state_session = f"openenv-{uuid.uuid4().hex}"
        #: Made at the first code-mode run; its workspace lasts as long as the environment.
        self._code_sandbox: Sandbox | None = None

    # -- OpenEnv's in-process client -----------------------------------------------------

    #: Whether a server connects `mcp_client` as each session starts, as OpenEnv's does. Off by
    #: default: tools are called without the client, so it is made and connected at its first
    #: use (`mcp_session()` or `async with env.mcp_client`) and then held until the session
    #: ends. Set True for code that calls `self.mcp_client` without entering it first.
    connect_mcp_client_at_start: bool = False

    @property
    def mcp_client(self) -> Any:
        """A fastmcp `Client` on this environment's server, as OpenEnv's environments hold one;
        made on first use (tools are called without it here), None once closed."""
        if "_mcp_client" not in self.__dict__:
            if self.mcp_server is None:
                return None
            client = _held_client_type()(self.mcp_server)
            client._openenv_env = weakref.ref(self)
            self.__dict__["_mcp_client"] = client
        return self.__dict__["_mcp_client"]

    @mcp_client.setter
    def mcp_client(self, value: Any) -> None:
        self.__dict__["_mcp_client"] = value

    @contextlib.asynccontextmanager
    async def mcp_session(self) -> AsyncIterator[Any]:
        """`async with env.mcp_session() as client:` an open fastmcp client on the tools."""
        client = self.mcp_client
        if client is None:
            raise RuntimeError("the MCP client is not available: the environment is closed")
        async with client:
            yield client

    def session_context(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """What a server holds for each session: `mcp_session()` only when it must be open from
        the start (opted in, overridden, or a client set by the environment); otherwise a hold
        the client joins at its first use, so a session that never uses it never makes it
        (no ~0.4 ms and no in-process MCP session per session, no fastmcp client import)."""
        given = self.__dict__.get("_mcp_client")
        if (
            self.connect_mcp_client_at_start
            or type(self).mcp_session is not MCPEnvironment.mcp_session
            or (given is not None and getattr(given, "_openenv_env", None) is None)
        ):
            return self.mcp_session()
        return _ClientHold(self)

    # -- mode-aware tools -------------------------------------------------------------

    @property
    def mode(self) -> str | None:
        return self._mode

    @mode.setter
    def mode(self, value: str | None) -> None:
        if value is not None and value not in _MODES:
            raise ValueError(f"Invalid mode {value!r}: use 'simulation' or 'production'")
        self._mode = value

    def tool(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        mode: str | None = None,
        name: str | None = None,
        description: str | None = None,
    ) -> Any:
        """Register a tool; with `mode`, it exists only when the server runs in that mode."""
        if mode is not None and mode not in _MODES:
            raise ValueError(f"Invalid tool mode {mode!r}: use None, 'simulation' or 'production'")

        def register(func: Callable[..., Any]) -> Callable[..., Any]:
            tool_name = name or func.__name__
            if tool_name in RESERVED_TOOL_NAMES:
                raise ValueError(
                    f"Tool name {tool_name!r} is reserved ({sorted(RESERVED_TOOL_NAMES)})"
                )
            if mode is None:
                self.mcp_server.tool(func, name=tool_name, description=description)
            else:
                made = FunctionTool.from_function(func, name=tool_name, description=description)
                self._mode_tools.setdefault(tool_name, {})[mode] = made
            return func

        return register(fn) if fn is not None else register

    # -- listing and calling -----------------------------------------------------------

    async def _server_tools(self) -> list[Any]:
        tools = list(await self.mcp_server.list_tools())
        if not self._reserved_checked:
            _refuse_reserved_names({t.name for t in tools})
            self._reserved_checked = True
        return tools

    async def list_mcp_tools(self) -> list[Any]:
        """Every tool callable now, as `mcp.types.Tool` objects."""
        tools = [t.to_mcp_tool() for t in await self._server_tools()]
        seen = {t.name for t in tools}
        for tool_name, by_mode in self._mode_tools.items():
            made = by_mode.get(self._mode or "")
            if made is not None and tool_name not in seen:
                tools.append(made.to_mcp_tool())
        return tools

    async def list_tools(self) -> list[Tool]:
        return [
            Tool(name=t.name, description=t.description or "", input_schema=t.input_schema)
            for t in await self.list_mcp_tools()
        ]

    async def call_tool_raw(
        self, name: str, arguments: dict[str, Any] | None = None, timeout_s: float | None = None
    ) -> Any:
        """Call a tool and return fastmcp's ToolResult; raises `ToolCallFailed` when it fails."""
        arguments = arguments or {}
        limit = timeout_s or MCP_TOOL_CALL_TIMEOUT
        token = None
        try:
            by_mode = self._mode_tools.get(name)
            if by_mode is None and not self._reserved_checked:
                # Before the session id below: listed under one, fastmcp would look up (and
                # so make) its state store for session rules (see mcp_fast_call.py).
                await self._server_tools()
            # Outside a live MCP session (in process, HTTP /step, WebSocket steps and OpenEnv's
            # JSON-RPC) fastmcp has no session id for `ctx` state: give it this environment's.
            if _state_session is not None and _state_session.get() is None:
                token = _state_session.set(self._tool_state_session)
            if by_mode is not None:
                made = by_mode.get(self._mode or "")
                if made is None:
                    raise ToolCallFailed(
                        ToolErrorType.TOOL_NOT_FOUND,
                        f"Tool '{name}' is not available in {self._mode} mode",
                    )
                call = made.run(arguments)
            else:
                call = self._call_server_tool(name, arguments)
            if not _SHARED_DEADLINES:  # pragma: no cover (Python 3.10)
                return await asyncio.wait_for(call, limit)
            deadline = start_deadline(limit)
            try:
                result = await call
            except BaseException as exc:
                deadline.finish(exc)  # TimeoutError if the deadline cancelled the call
                raise
            deadline.finish()
            return result
        except (TimeoutError, asyncio.TimeoutError):
            raise ToolCallFailed(
                ToolErrorType.TIMEOUT, f"Tool '{name}' timed out after {limit:g} seconds"
            ) from None
        except Exception as exc:
            raise classify_tool_exception(name, exc) from exc
        finally:
            if token is not None and _state_session is not None:
                _state_session.reset(token)

    async def _call_server_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        """`FastMCP.call_tool`, or its direct equivalent when the server allows it."""
        server = self.mcp_server
        fast = self.__dict__.get("_fast_caller")
        if fast is None or fast.server is not server:
            fast = self.__dict__["_fast_caller"] = FastToolCaller(server)
        tool = await fast.resolve(name)
        if tool is not None:
            result = await fast.call(tool, name, arguments)
            if result is not None:
                return result
        return await server.call_tool(name, arguments)

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None = None, timeout_s: float | None = None
    ) -> CallToolObservation:
        try:
            result = await self.call_tool_raw(name, arguments, timeout_s)
        except ToolCallFailed as failed:
            return CallToolObservation(
                tool_name=name,
                error=ToolErrorModel(error_type=failed.error_type, message=failed.message),
            )
        return CallToolObservation(tool_name=name, result=tool_call_result(result))

    # -- the Environment interface ------------------------------------------------------

    async def step_async(
        self, action: Action, timeout_s: float | None = None, **kwargs: Any
    ) -> Observation:
        if isinstance(action, CallToolAction):
            return await self.call_tool(action.tool_name, action.arguments, timeout_s)
        if isinstance(action, ListToolsAction):
            return ListToolsObservation(tools=await self.list_tools())
        if isinstance(action, ExecuteCodeAction):
            if not self.supports_code_mode:
                raise InvalidActionError(
                    f"{type(self).__name__} does not accept code mode (execute_code) actions",
                    errors=[{"loc": ["type"], "msg": "code mode is off", "type": "value_error"}],
                )
            observation, _ = await self.run_code_sandboxed(action.code, timeout_s)
            return observation
        return await self._step_impl_async(action, timeout_s=timeout_s, **kwargs)

    def step(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        return run_coroutine_sync(self.step_async(action, timeout_s=timeout_s, **kwargs))

    async def _step_impl_async(
        self, action: Action, timeout_s: float | None = None, **kwargs: Any
    ) -> Observation:
        return await asyncio.to_thread(self._step_impl, action, timeout_s=timeout_s, **kwargs)

    def _step_impl(
        self, action: Action, timeout_s: float | None = None, **kwargs: Any
    ) -> Observation:
        raise ValueError(
            f"{type(self).__name__} accepts only list_tools and call_tool actions, "
            f"not {type(action).__name__}"
        )

    # -- code mode (OpenEnv's CodeAct helpers) ------------------------------------------------

    @property
    def supports_code_mode(self) -> bool:
        return self.code_mode_enabled

    def get_callables(self) -> dict[str, Callable[..., Any]]:
        """The functions behind the tools available now, by tool name, for trusted in-process
        code (model output goes through the sandboxed `execute_code`)."""
        return run_coroutine_sync(self.tool_functions())

    async def tool_functions(self) -> dict[str, Callable[..., Any]]:
        """`get_callables()` for async callers."""
        found = {
            t.name: t.fn for t in await self._server_tools() if callable(getattr(t, "fn", None))
        }
        for tool_name, by_mode in self._mode_tools.items():
            made = by_mode.get(self._mode or "")
            if made is not None and tool_name not in found:
                found[tool_name] = made.fn
        return found

    async def _sandbox_for_code(self) -> Sandbox:
        sandbox: Sandbox | None = getattr(self, "_code_sandbox", None)
        if sandbox is None:
            # Off the event loop: a root server's sandbox starts a helper process.
            try:
                sandbox = await asyncio.to_thread(
                    Sandbox, limits=self.code_mode_limits.sandbox_limits()
                )
            except Exception as exc:  # not the agent's fault: an infrastructure error
                raise SandboxError(f"code mode: no sandbox to run the code in: {exc}") from exc
            self._code_sandbox = sandbox
        return sandbox

    async def run_code_sandboxed(
        self, code: str, timeout_s: float | None = None
    ) -> tuple[ExecuteCodeObservation, dict[str, Any] | None]:
        """Run `code` in this environment's sandbox, each tool a function forwarded to
        `call_tool_raw`; also returns the code's exception as the runner reported it."""
        if self.mcp_server is None:
            raise RuntimeError("the environment is closed")
        sandbox = await self._sandbox_for_code()
        return await run_code(self, sandbox, code, self.code_mode_limits, wall_time_s=timeout_s)

    def execute_code(self, code: str, *, in_process: bool = False) -> Observation:
        """OpenEnv's code mode: the value the code assigns to `result` comes back in
        `metadata["result"]`, a failure as `metadata["error"]`. The code runs in the sandbox
        (model output must never run in the server); `in_process=True` runs it in this
        process as OpenEnv does, for trusted code only (no isolation and no time limit)."""
        if in_process:
            return self._execute_code_in_process(code)
        observation, exception = run_coroutine_sync(self.run_code_sandboxed(code))
        return Observation(done=False, reward=0.0, metadata=compat_metadata(observation, exception))

    def _execute_code_in_process(self, code: str) -> Observation:
        namespace: dict[str, Any] = dict(self.get_callables())
        assigned: dict[str, Any] = {}
        try:
            exec(code, namespace, assigned)
        except SyntaxError as exc:
            return Observation(done=False, reward=0.0, metadata={"error": f"Syntax error: {exc}"})
        except Exception as exc:
            return Observation(done=False, reward=0.0, metadata={"error": str(exc)})
        return Observation(done=False, reward=0.0, metadata={"result": assigned.get("result")})

    def warm_imports(self) -> None:
        """The first tool call imports fastmcp's result class (its client package) and, for
        the tool-state store, key_value (~150 ms, mostly beartype): lazily, so that `/health`
        need not wait for them, but a fork server should pay them once for all its children."""
        _call_tool_result_type()
        with contextlib.suppress(ImportError):  # fastmcp versions without a key_value store
            importlib.import_module("key_value.aio.adapters.pydantic")
            importlib.import_module("key_value.aio.stores.memory")

    def close(self) -> None:
        self.mcp_server = None  # type: ignore[assignment]
        self.mcp_client = None
        sandbox, self._code_sandbox = getattr(self, "_code_sandbox", None), None
        if sandbox is not None:
            sandbox.close()
