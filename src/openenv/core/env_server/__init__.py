"""Everything an environment author needs to build and serve an environment.

Names are imported on first use, so that importing a light submodule (`env_server.types`,
`env_server.mcp_types`) from a client does not load FastAPI, uvicorn or fastmcp.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_WHERE = {
    "ServerConfig": ".config",
    "ConcurrencyConfigurationError": ".errors",
    "InvalidActionError": "..errors",
    "HTTPEnvServer": ".http_server",
    "create_app": ".http_server",
    "create_fastapi_app": ".http_server",
    "Environment": ".interfaces",
    "Message": ".interfaces",
    "ModelTokenizer": ".interfaces",
    "Transform": ".interfaces",
    "MCPEnvironment": ".mcp_environment",
    "CodeModeLimits": ".code_mode",
    **dict.fromkeys(
        [
            "CallToolAction",
            "CallToolObservation",
            "ExecuteCodeAction",
            "ExecuteCodeObservation",
            "ToolCallRecord",
            "ListToolsAction",
            "ListToolsObservation",
            "Tool",
            "ToolError",
            "ToolErrorType",
            "JsonRpcError",
            "JsonRpcErrorCode",
            "JsonRpcRequest",
            "JsonRpcResponse",
            "McpMethod",
            "RESERVED_TOOL_NAMES",
            "WSMCPMessage",
            "WSMCPResponse",
        ],
        ".mcp_types",
    ),
    "deserialize_action": ".serialization",
    "deserialize_action_with_preprocessing": ".serialization",
    "serialize_observation": ".serialization",
    **dict.fromkeys(
        [
            "Action",
            "BaseMessage",
            "CodeExecResult",
            "ConcurrencyConfig",
            "EnvironmentMetadata",
            "ErrorCategory",
            "HealthResponse",
            "HealthStatus",
            "Observation",
            "ResetRequest",
            "ResetResponse",
            "SchemaResponse",
            "ServerCapacityStatus",
            "ServerMode",
            "SessionInfo",
            "State",
            "StepRequest",
            "StepResponse",
            "WireBytes",
            "WireBytes",
            "WSErrorCode",
        ],
        ".types",
    ),
}

if TYPE_CHECKING:
    from ..errors import InvalidActionError
    from .code_mode import CodeModeLimits
    from .config import ServerConfig
    from .errors import ConcurrencyConfigurationError
    from .http_server import HTTPEnvServer, create_app, create_fastapi_app
    from .interfaces import Environment, Message, ModelTokenizer, Transform
    from .mcp_environment import MCPEnvironment
    from .mcp_types import (
        RESERVED_TOOL_NAMES,
        CallToolAction,
        CallToolObservation,
        ExecuteCodeAction,
        ExecuteCodeObservation,
        JsonRpcError,
        JsonRpcErrorCode,
        JsonRpcRequest,
        JsonRpcResponse,
        ListToolsAction,
        ListToolsObservation,
        McpMethod,
        Tool,
        ToolCallRecord,
        ToolError,
        ToolErrorType,
        WSMCPMessage,
        WSMCPResponse,
    )
    from .serialization import (
        deserialize_action,
        deserialize_action_with_preprocessing,
        serialize_observation,
    )
    from .types import (
        Action,
        BaseMessage,
        CodeExecResult,
        ConcurrencyConfig,
        EnvironmentMetadata,
        ErrorCategory,
        HealthResponse,
        HealthStatus,
        Observation,
        ResetRequest,
        ResetResponse,
        SchemaResponse,
        ServerCapacityStatus,
        ServerMode,
        SessionInfo,
        State,
        StepRequest,
        StepResponse,
        WSErrorCode,
    )


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "RESERVED_TOOL_NAMES",
    "Action",
    "BaseMessage",
    "CallToolAction",
    "CallToolObservation",
    "CodeExecResult",
    "CodeModeLimits",
    "ConcurrencyConfig",
    "ConcurrencyConfigurationError",
    "Environment",
    "EnvironmentMetadata",
    "ErrorCategory",
    "ExecuteCodeAction",
    "ExecuteCodeObservation",
    "HTTPEnvServer",
    "HealthResponse",
    "HealthStatus",
    "InvalidActionError",
    "JsonRpcError",
    "JsonRpcErrorCode",
    "JsonRpcRequest",
    "JsonRpcResponse",
    "ListToolsAction",
    "ListToolsObservation",
    "MCPEnvironment",
    "McpMethod",
    "Message",
    "ModelTokenizer",
    "Observation",
    "ResetRequest",
    "ResetResponse",
    "SchemaResponse",
    "ServerCapacityStatus",
    "ServerConfig",
    "ServerMode",
    "SessionInfo",
    "State",
    "StepRequest",
    "StepResponse",
    "Tool",
    "ToolCallRecord",
    "ToolError",
    "ToolErrorType",
    "Transform",
    "WSErrorCode",
    "WSMCPMessage",
    "WSMCPResponse",
    "WireBytes",
    "create_app",
    "create_fastapi_app",
    "deserialize_action",
    "deserialize_action_with_preprocessing",
    "serialize_observation",
]
