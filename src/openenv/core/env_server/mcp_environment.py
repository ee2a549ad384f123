"""`MCPEnvironment`: an environment whose actions are MCP tool calls, backed by fastmcp.

Tools are called in-process on the FastMCP server (no client transport), so failures keep
their exception types and are classified by type: `tool_not_found`, `invalid_args`,
`execution_error`, `timeout`. The same `list_tools` / `call_tool` serve every path (Gym-style
steps, JSON-RPC `/mcp`, real MCP, `{"type":"mcp"}` over `/ws`), so mode-specific tools are visible
on all of them.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any

import pydantic
from fastmcp import FastMCP
from fastmcp.exceptions import NotFoundError, ToolError
from fastmcp.exceptions import ValidationError as ToolValidationError
from fastmcp.tools import FunctionTool

from ...core.utils import run_coroutine_sync
from .interfaces import Environment, Transform
from .mcp_types import (
    RESERVED_TOOL_NAMES,
    CallToolAction,
    CallToolObservation,
    ListToolsAction,
    ListToolsObservation,
    Tool,
    ToolErrorType,
)
from .mcp_types import (
    ToolError as ToolErrorModel,
)
from .types import Action, Observation

try:  # fastmcp >= 3
    from fastmcp.exceptions import DisabledError
except ImportError:  # pragma: no cover
    DisabledError = NotFoundError  # type: ignore[misc,assignment]

#: Seconds a tool call may take when the caller gives no timeout.
MCP_TOOL_CALL_TIMEOUT = 30.0
_MODES = ("simulation", "production")

if sys.version_info >= (3, 11):
    _timeout = asyncio.timeout
else:  # pragma: no cover
    _timeout = None


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


def tool_result_payload(result: Any) -> dict[str, Any]:
    """A fastmcp ToolResult as OpenEnv clients read it (snake case, unwrapped `data`)."""
    structured = getattr(result, "structured_content", None)
    meta = getattr(result, "meta", None)
    content = [block.model_dump(mode="json") for block in getattr(result, "content", []) or []]
    if isinstance(structured, dict) and (meta or {}).get("fastmcp", {}).get("wrap_result"):
        data: Any = structured.get("result")
    elif structured is not None:
        data = structured
    elif len(content) == 1 and content[0].get("type") == "text":
        data = content[0].get("text")
    else:
        data = None
    return {
        "content": content,
        "structured_content": structured,
        "meta": meta,
        "data": data,
        "is_error": bool(getattr(result, "is_error", False)),
    }


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


class MCPEnvironment(Environment):
    """Base class for tool environments. Subclasses implement `reset` and `state`.

    Non-MCP actions go to `_step_impl` (sync) or `_step_impl_async`.
    """

    def __init__(
        self, mcp_server: FastMCP, transform: Transform | None = None, rubric: Any = None
    ) -> None:
        super().__init__(transform=transform, rubric=rubric)
        self.mcp_server = mcp_server
        self._mode: str | None = "simulation"
        self._mode_tools: dict[str, dict[str, FunctionTool]] = {}
        self._reserved_checked = False

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
            clash = sorted({t.name for t in tools} & RESERVED_TOOL_NAMES)
            if clash:
                raise ValueError(f"Tools use reserved names {clash}; rename them")
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
        try:
            by_mode = self._mode_tools.get(name)
            if by_mode is not None:
                made = by_mode.get(self._mode or "")
                if made is None:
                    raise ToolCallFailed(
                        ToolErrorType.TOOL_NOT_FOUND,
                        f"Tool '{name}' is not available in {self._mode} mode",
                    )
                call = made.run(arguments)
            else:
                if not self._reserved_checked:
                    await self._server_tools()
                call = self.mcp_server.call_tool(name, arguments)
            if _timeout is not None:
                async with _timeout(limit):
                    return await call
            return await asyncio.wait_for(call, limit)  # pragma: no cover (Python 3.10)
        except (TimeoutError, asyncio.TimeoutError):
            raise ToolCallFailed(
                ToolErrorType.TIMEOUT, f"Tool '{name}' timed out after {limit:g} seconds"
            ) from None
        except Exception as exc:
            raise classify_tool_exception(name, exc) from exc

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
        return CallToolObservation(tool_name=name, result=tool_result_payload(result))

    # -- the Environment interface ------------------------------------------------------

    async def step_async(
        self, action: Action, timeout_s: float | None = None, **kwargs: Any
    ) -> Observation:
        if isinstance(action, CallToolAction):
            return await self.call_tool(action.tool_name, action.arguments, timeout_s)
        if isinstance(action, ListToolsAction):
            return ListToolsObservation(tools=await self.list_tools())
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

    def close(self) -> None:
        self.mcp_server = None  # type: ignore[assignment]
