"""The typed models environments and clients share: Action, Observation, State and friends.

Field names and defaults follow OpenEnv's so that OpenEnv code and peers interoperate with ours;
additions are optional and ignored by OpenEnv peers. Only pydantic is imported here (and the
protocol module), so clients can use these models without the server stack.
"""

from __future__ import annotations

import base64
from enum import Enum
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    model_validator,
)

# The wire messages are defined once, in the protocol module; OpenEnv code imports them from here.
from ..protocol import (  # noqa: F401
    ERROR_CATEGORY,
    ErrorCategory,
    ResetRequest,
    ResetResponse,
    StepRequest,
    StepResponse,
    WSCloseMessage,
    WSErrorCode,
    WSErrorResponse,
    WSIncomingMessage,
    WSMCPMessage,
    WSMCPResponse,
    WSObservationResponse,
    WSResetMessage,
    WSStateMessage,
    WSStateResponse,
    WSStepMessage,
)

Scalar = Union[int, float, bool]


def _bytes_from_wire(value: Any) -> Any:
    if isinstance(value, str):  # how bytes travel in a JSON frame
        return base64.b64decode(value, validate=True)
    return value


#: A bytes field of an observation (an image, an encoded array): in a binary frame
#: (`openenv.v1.bin`) it travels as raw bytes, in JSON as base64 text, and reads back as bytes
#: either way.
WireBytes = Annotated[
    bytes,
    BeforeValidator(_bytes_from_wire),
    PlainSerializer(lambda value: base64.b64encode(value).decode("ascii"), when_used="json"),
]


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
