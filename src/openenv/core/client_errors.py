"""Typed client exceptions.

Every error says who is at fault (`category`): the caller (`client`), the environment's own
code (`environment`) or the serving infrastructure (`infrastructure`). A trainer should drop or
retry an episode that ended in an infrastructure error, never score it as reward 0:
`is_infrastructure_error(exc)` tells which.

They subclass `RuntimeError` and keep OpenEnv's message format, so code written for OpenEnv's
client (`except RuntimeError`) still works.
"""

from __future__ import annotations

from typing import Any


class OpenEnvError(RuntimeError):
    """Base class of every error raised by openenv clients."""

    category: str = "infrastructure"
    retryable: bool = False


class ServerError(OpenEnvError):
    """The server answered with an error frame; `code` is the wire error code."""

    def __init__(self, message: str, code: str, data: dict[str, Any] | None = None) -> None:
        self.message = message
        self.code = code
        self.data = dict(data or {})
        self.category = self.data.get("category") or _CATEGORY_BY_CODE.get(code, "infrastructure")
        super().__init__(f"Server error: {message} (code: {code})")


class InvalidRequestError(ServerError):
    """The request was malformed (bad JSON, unknown type, invalid action, too large)."""

    category = "client"


class EnvironmentExecutionError(ServerError):
    """The environment's own code raised in its factory, reset, step or state."""

    category = "environment"


class RewardError(ServerError):
    """The environment's rubric could not score a step (an LLM judge whose endpoint is down is
    `category == "infrastructure"`). The episode has no valid reward; never score it as 0."""

    category = "environment"


class CapacityReachedError(ServerError):
    """The server had no free session slot within its queue wait."""

    retryable = True


class SessionLostError(ServerError):
    """The server no longer holds this session (expired, reaped or unknown)."""


class ConnectionLostError(OpenEnvError):
    """The connection dropped and the session could not be resumed."""

    retryable = True


class RequestTimeoutError(OpenEnvError, TimeoutError):
    """No reply within `message_timeout_s`."""

    retryable = True


class ToolCallError(OpenEnvError):
    """A tool call failed.

    `error_type` is tool_not_found, invalid_args, execution_error or timeout.
    """

    def __init__(self, tool_name: str, error_type: str, message: str) -> None:
        self.tool_name = tool_name
        self.error_type = error_type
        self.message = message
        self.category = (
            "client" if error_type in ("tool_not_found", "invalid_args") else "environment"
        )
        super().__init__(f"Tool '{tool_name}' failed: {message}")


_CATEGORY_BY_CODE = {
    "INVALID_JSON": "client",
    "UNKNOWN_TYPE": "client",
    "VALIDATION_ERROR": "client",
    "MESSAGE_TOO_LARGE": "client",
    "EXECUTION_ERROR": "environment",
    "FACTORY_ERROR": "environment",
    "REWARD_ERROR": "environment",
}

_CLASS_BY_CODE: dict[str, type[ServerError]] = {
    "INVALID_JSON": InvalidRequestError,
    "UNKNOWN_TYPE": InvalidRequestError,
    "VALIDATION_ERROR": InvalidRequestError,
    "MESSAGE_TOO_LARGE": InvalidRequestError,
    "EXECUTION_ERROR": EnvironmentExecutionError,
    "FACTORY_ERROR": EnvironmentExecutionError,
    "REWARD_ERROR": RewardError,
    "CAPACITY_REACHED": CapacityReachedError,
    "SESSION_ERROR": SessionLostError,
    "SESSION_NOT_FOUND": SessionLostError,
    "SESSION_EXPIRED": SessionLostError,
}


def error_from_data(data: dict[str, Any]) -> ServerError:
    """Build the typed exception for an error frame's `data`."""
    code = str(data.get("code", "SESSION_ERROR"))
    cls = _CLASS_BY_CODE.get(code, ServerError)
    return cls(str(data.get("message", "unknown error")), code, data)


def is_infrastructure_error(exc: BaseException) -> bool:
    """True when an episode failed for reasons outside the agent and the environment."""
    if isinstance(exc, OpenEnvError):
        return exc.category == "infrastructure"
    return isinstance(exc, (ConnectionError, TimeoutError, OSError))
