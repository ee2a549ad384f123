"""Actions, observations and JSON-RPC models for MCP tool environments."""

from __future__ import annotations

import dataclasses
import json
from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, field_serializer

from ..protocol import WSMCPMessage, WSMCPResponse
from .types import Action, Observation

__all__ = [
    "RESERVED_TOOL_NAMES",
    "CallToolAction",
    "CallToolObservation",
    "ExecuteCodeAction",
    "ExecuteCodeObservation",
    "JsonRpcError",
    "JsonRpcErrorCode",
    "JsonRpcRequest",
    "JsonRpcResponse",
    "ListToolsAction",
    "ListToolsObservation",
    "McpMethod",
    "Tool",
    "ToolCallRecord",
    "ToolError",
    "ToolErrorType",
    "WSMCPMessage",
    "WSMCPResponse",
    "call_tool_result_wire",
    "rpc_error",
    "rpc_result",
]

RESERVED_TOOL_NAMES = frozenset({"reset", "step", "state", "close"})


class Tool(BaseModel):
    """A tool as the Gym-style path describes it (`input_schema`, snake case)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=dict)


class ToolErrorType(str, Enum):
    EXECUTION_ERROR = "execution_error"
    INVALID_ARGS = "invalid_args"
    TRANSPORT_ERROR = "transport_error"
    TOOL_NOT_FOUND = "tool_not_found"
    TIMEOUT = "timeout"


class ToolError(BaseModel):
    model_config = ConfigDict(extra="forbid")

    error_type: ToolErrorType
    message: str


class ListToolsAction(Action):
    type: Literal["list_tools"] = "list_tools"


class CallToolAction(Action):
    type: Literal["call_tool"] = "call_tool"
    tool_name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ListToolsObservation(Observation):
    tools: list[Tool]


def call_tool_result_wire(result: Any) -> dict[str, Any]:
    """A tool result (fastmcp's `CallToolResult` or any object with its fields) as OpenEnv's wire
    carries it: snake case, content blocks as JSON, `data` the tool's value."""
    return {
        "content": [
            block.model_dump(mode="json") if isinstance(block, BaseModel) else block
            for block in getattr(result, "content", None) or []
        ],
        "structured_content": getattr(result, "structured_content", None),
        "meta": getattr(result, "meta", None),
        "data": getattr(result, "data", None),
        "is_error": bool(getattr(result, "is_error", False)),
    }


def _is_call_tool_result(value: Any) -> bool:
    return (
        dataclasses.is_dataclass(value)
        and not isinstance(value, type)
        and hasattr(value, "structured_content")
        and hasattr(value, "is_error")
    )


class CallToolObservation(Observation):
    """A tool call's outcome. In process `result` is fastmcp's `CallToolResult` (its `.data` is
    the tool's value); on the wire it is that result's fields as a JSON object."""

    tool_name: str
    result: Any = None
    error: ToolError | None = None

    @field_serializer("result", mode="wrap")
    def _result_on_the_wire(self, value: Any, handler: SerializerFunctionWrapHandler) -> Any:
        if _is_call_tool_result(value):
            return call_tool_result_wire(value)
        return handler(value)


class ExecuteCodeAction(Action):
    """Code mode: run Python in the environment's sandbox, with each tool as a function, so an
    agent calls several tools in one step. The value the code assigns to `result` comes back."""

    type: Literal["execute_code"] = "execute_code"
    code: str


class ToolCallRecord(BaseModel):
    """One tool call made by code-mode code, in the order made."""

    tool_name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    #: The tool's value, as `call_tool` returns it (None when the call failed).
    result: Any = None
    error: ToolError | None = None


class ExecuteCodeObservation(Observation):
    """What code-mode code did. `status` is "ok", "error" (the code raised: `error` says what,
    `stderr` has the traceback) or the limit that stopped it ("timeout", "memory_limit",
    "output_limit", ...; see `openenv.sandbox.ExecStatus`)."""

    status: str = "ok"
    #: The value of the code's `result` variable (JSON; else its `repr`).
    result: Any = None
    stdout: str = ""
    stderr: str = ""
    #: "ExceptionType: message" when the code failed, else None.
    error: str | None = None
    tool_calls: list[ToolCallRecord] = Field(default_factory=list)


class McpMethod(str, Enum):
    TOOLS_LIST = "tools/list"
    TOOLS_CALL = "tools/call"
    SESSION_CREATE = "openenv/session/create"
    SESSION_CLOSE = "openenv/session/close"


class JsonRpcErrorCode(int, Enum):
    PARSE_ERROR = -32700
    INVALID_REQUEST = -32600
    METHOD_NOT_FOUND = -32601
    INVALID_PARAMS = -32602
    INTERNAL_ERROR = -32603
    SERVER_ERROR = -32000


class JsonRpcRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    jsonrpc: Literal["2.0"]
    method: str
    params: dict[str, Any] = Field(default_factory=dict)
    id: str | int | None = None


#: The message of each standard code, used when an error is built from its code alone.
_DEFAULT_MESSAGES = {
    JsonRpcErrorCode.PARSE_ERROR: "Parse error",
    JsonRpcErrorCode.INVALID_REQUEST: "Invalid Request",
    JsonRpcErrorCode.METHOD_NOT_FOUND: "Method not found",
    JsonRpcErrorCode.INVALID_PARAMS: "Invalid params",
    JsonRpcErrorCode.INTERNAL_ERROR: "Internal error",
    JsonRpcErrorCode.SERVER_ERROR: "Server error",
}


class JsonRpcError(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    code: int
    message: str
    data: Any = None

    @classmethod
    def from_code(
        cls, code: JsonRpcErrorCode, message: str | None = None, data: Any = None
    ) -> JsonRpcError:
        """An error with a standard code; `message` defaults to the code's standard text."""
        return cls(
            code=int(code),
            message=message or _DEFAULT_MESSAGES.get(code, "Unknown error"),
            data=data,
        )


class JsonRpcResponse(BaseModel):
    """A JSON-RPC 2.0 response; it dumps exactly one of `result` / `error`, as the
    specification requires (a null result is still a result)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    jsonrpc: Literal["2.0"] = "2.0"
    result: Any = None
    error: JsonRpcError | None = None
    id: str | int | None = None

    @classmethod
    def success(cls, result: Any, request_id: str | int | None = None) -> JsonRpcResponse:
        return cls(result=result, id=request_id)

    @classmethod
    def error_response(
        cls,
        code: JsonRpcErrorCode,
        message: str | None = None,
        data: Any = None,
        request_id: str | int | None = None,
    ) -> JsonRpcResponse:
        return cls(error=JsonRpcError.from_code(code, message, data), id=request_id)

    def to_wire(self) -> dict[str, Any]:
        """Exactly one of `result` / `error`, as JSON-RPC 2.0 requires."""
        out: dict[str, Any] = {"jsonrpc": "2.0", "id": self.id}
        if self.error is not None:
            out["error"] = self.error.model_dump()
        else:
            out["result"] = self.result
        return out

    def model_dump(self, **kwargs: Any) -> dict[str, Any]:
        """The wire form (`to_wire`); pydantic's options do not apply to it."""
        return self.to_wire()

    def model_dump_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_wire())


def rpc_result(request_id: Any, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def rpc_error(request_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {"code": int(code), "message": message, "data": data},
    }
