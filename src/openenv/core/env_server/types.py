"""Wire models shared by the server and the clients.

Field names, defaults and error codes follow OpenEnv's protocol so that OpenEnv clients and
servers interoperate with ours; additions are optional and ignored by OpenEnv peers.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

Scalar = Union[int, float, bool]


class Action(BaseModel):
    """Base class of everything an agent can do; subclasses add typed fields."""

    model_config = ConfigDict(
        extra="forbid", validate_assignment=True, arbitrary_types_allowed=True
    )

    metadata: dict[str, Any] = Field(default_factory=dict)


class Observation(BaseModel):
    """What the environment returns after reset/step.

    `metadata` travels to the client as a top-level key of the payload (OpenEnv drops it).
    """

    model_config = ConfigDict(
        extra="forbid", validate_assignment=True, arbitrary_types_allowed=True
    )

    done: bool = False
    reward: bool | int | float | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class State(BaseModel):
    """Episode bookkeeping; subclasses may add fields (extra keys are kept)."""

    model_config = ConfigDict(extra="allow", validate_assignment=True, arbitrary_types_allowed=True)

    episode_id: str | None = None
    step_count: int = Field(default=0, ge=0)


class ResetRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    seed: int | None = Field(default=None, ge=0)
    episode_id: str | None = Field(default=None, max_length=255)


class StepRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    action: dict[str, Any]
    timeout_s: float | None = Field(default=None, gt=0)
    request_id: str | None = Field(default=None, max_length=255)


class ResetResponse(BaseModel):
    """Shape of the HTTP reset/step reply (the `metadata` and `session_id` keys are additions)."""

    model_config = ConfigDict(extra="allow")

    observation: dict[str, Any]
    reward: bool | int | float | None = None
    done: bool = False
    metadata: dict[str, Any] = Field(default_factory=dict)


StepResponse = ResetResponse


class BaseMessage(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class CodeExecResult(BaseMessage):
    stdout: str
    stderr: str
    exit_code: int


class EnvironmentMetadata(BaseMessage):
    name: str
    description: str
    readme_content: str | None = None
    version: str | None = None
    author: str | None = None
    documentation_url: str | None = None


class SchemaResponse(BaseMessage):
    action: dict[str, Any]
    observation: dict[str, Any]
    state: dict[str, Any]


class HealthStatus(str, Enum):
    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"
    DEGRADED = "degraded"


class HealthResponse(BaseMessage):
    status: HealthStatus = HealthStatus.HEALTHY


class ServerMode(str, Enum):
    SIMULATION = "simulation"
    PRODUCTION = "production"


class ErrorCategory(str, Enum):
    """Who is at fault, so that a trainer never scores an infrastructure failure as a reward."""

    CLIENT = "client"  # the request was malformed; fix the caller
    ENVIRONMENT = "environment"  # the environment's own code raised
    INFRASTRUCTURE = "infrastructure"  # capacity, lost sessions, timeouts, server faults


class WSErrorCode(str, Enum):
    INVALID_JSON = "INVALID_JSON"
    UNKNOWN_TYPE = "UNKNOWN_TYPE"
    VALIDATION_ERROR = "VALIDATION_ERROR"
    EXECUTION_ERROR = "EXECUTION_ERROR"
    CAPACITY_REACHED = "CAPACITY_REACHED"
    FACTORY_ERROR = "FACTORY_ERROR"
    SESSION_ERROR = "SESSION_ERROR"
    # Additions (never sent to a client that does not use the matching extension, except
    # MESSAGE_TOO_LARGE, which replaces OpenEnv's connection drop on oversized frames).
    MESSAGE_TOO_LARGE = "MESSAGE_TOO_LARGE"
    SESSION_NOT_FOUND = "SESSION_NOT_FOUND"
    SESSION_EXPIRED = "SESSION_EXPIRED"
    TIMEOUT = "TIMEOUT"
    REWARD_ERROR = "REWARD_ERROR"


ERROR_CATEGORY: dict[WSErrorCode, ErrorCategory] = {
    WSErrorCode.INVALID_JSON: ErrorCategory.CLIENT,
    WSErrorCode.UNKNOWN_TYPE: ErrorCategory.CLIENT,
    WSErrorCode.VALIDATION_ERROR: ErrorCategory.CLIENT,
    WSErrorCode.MESSAGE_TOO_LARGE: ErrorCategory.CLIENT,
    WSErrorCode.EXECUTION_ERROR: ErrorCategory.ENVIRONMENT,
    WSErrorCode.FACTORY_ERROR: ErrorCategory.ENVIRONMENT,
    WSErrorCode.REWARD_ERROR: ErrorCategory.ENVIRONMENT,
    WSErrorCode.CAPACITY_REACHED: ErrorCategory.INFRASTRUCTURE,
    WSErrorCode.SESSION_ERROR: ErrorCategory.INFRASTRUCTURE,
    WSErrorCode.SESSION_NOT_FOUND: ErrorCategory.INFRASTRUCTURE,
    WSErrorCode.SESSION_EXPIRED: ErrorCategory.INFRASTRUCTURE,
    WSErrorCode.TIMEOUT: ErrorCategory.INFRASTRUCTURE,
}


class ConcurrencyConfig(BaseMessage):
    max_concurrent_envs: int = Field(default=1, ge=1)
    session_timeout: float | None = Field(default=None, gt=0)


class ServerCapacityStatus(BaseMessage):
    active_sessions: int = Field(ge=0)
    max_sessions: int = Field(ge=1)
    queued: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _active_within_max(self) -> ServerCapacityStatus:
        if self.active_sessions > self.max_sessions:
            raise ValueError("active_sessions cannot exceed max_sessions")
        return self

    @property
    def available_slots(self) -> int:
        return self.max_sessions - self.active_sessions

    @property
    def is_at_capacity(self) -> bool:
        return self.available_slots <= 0

    @classmethod
    def from_counts(cls, active: int, max_sessions: int) -> ServerCapacityStatus:
        return cls(active_sessions=active, max_sessions=max_sessions)


class SessionInfo(BaseMessage):
    session_id: str
    created_at: float
    last_activity_at: float
    step_count: int = Field(default=0, ge=0)
    environment_type: str
    transport: Literal["ws", "http", "mcp"] = "ws"


# --- WebSocket envelopes (OpenEnv names; `id` is our optional request-id extension) ---


class _WSMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str | int | None = None


class WSResetMessage(_WSMessage):
    type: Literal["reset"] = "reset"
    data: dict[str, Any] = Field(default_factory=dict)


class WSStepMessage(_WSMessage):
    type: Literal["step"] = "step"
    data: dict[str, Any]


class WSStateMessage(_WSMessage):
    type: Literal["state"] = "state"


class WSCloseMessage(_WSMessage):
    type: Literal["close"] = "close"


class WSMCPMessage(_WSMessage):
    type: Literal["mcp"] = "mcp"
    data: dict[str, Any]


WSIncomingMessage = Union[
    WSResetMessage, WSStepMessage, WSStateMessage, WSCloseMessage, WSMCPMessage
]


class WSObservationResponse(BaseModel):
    type: Literal["observation"] = "observation"
    data: dict[str, Any]


class WSStateResponse(BaseModel):
    type: Literal["state"] = "state"
    data: dict[str, Any]


class WSErrorResponse(BaseModel):
    type: Literal["error"] = "error"
    data: dict[str, Any]


class WSMCPResponse(BaseModel):
    type: Literal["mcp"] = "mcp"
    data: dict[str, Any]
