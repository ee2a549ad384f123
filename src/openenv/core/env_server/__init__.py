"""Everything an environment author needs to build and serve an environment."""

from .config import ServerConfig
from .errors import ConcurrencyConfigurationError
from .http_server import HTTPEnvServer, create_app, create_fastapi_app
from .interfaces import Environment, Message, ModelTokenizer, Transform
from .mcp_environment import MCPEnvironment
from .mcp_types import (
    CallToolAction,
    CallToolObservation,
    ListToolsAction,
    ListToolsObservation,
    Tool,
    ToolError,
    ToolErrorType,
)
from .serialization import deserialize_action, serialize_observation
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

__all__ = [
    "Action",
    "BaseMessage",
    "CallToolAction",
    "CallToolObservation",
    "CodeExecResult",
    "ConcurrencyConfig",
    "ConcurrencyConfigurationError",
    "Environment",
    "EnvironmentMetadata",
    "ErrorCategory",
    "HTTPEnvServer",
    "HealthResponse",
    "HealthStatus",
    "ListToolsAction",
    "ListToolsObservation",
    "MCPEnvironment",
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
    "ToolError",
    "ToolErrorType",
    "Transform",
    "WSErrorCode",
    "create_app",
    "create_fastapi_app",
    "deserialize_action",
    "serialize_observation",
]
