"""The one exception hierarchy of openenv, for servers and clients alike.

Every error says who is at fault (`category`): the caller (`client`), the environment's own
code (`environment`) or the serving infrastructure (`infrastructure`). A trainer should drop or
retry an episode that ended in an infrastructure error, never score it as reward 0:
`is_infrastructure_error(exc)` tells which.

A `ServerError` is both what a server raises to send an error frame (`to_data()`) and what a
client raises when it receives one (`error_from_data()`), so that one class means one wire code
on both ends. They subclass `RuntimeError` and keep OpenEnv's message format, so code written
for OpenEnv's client (`except RuntimeError`, `except ConnectionError`) still works.
"""

from __future__ import annotations

from typing import Any, ClassVar

from .protocol import HTTP_STATUS, WSErrorCode, error_category, error_data


class OpenEnvError(RuntimeError):
    """Base class of every error raised by openenv."""

    category: str = "infrastructure"
    retryable: bool = False


class ServerError(OpenEnvError):
    """An error frame: `code` is its wire code, `data` its payload, `message` its text.

    Raise a subclass from an environment (e.g. `InvalidActionError`) and the server sends it as
    it is; clients raise the class that matches the code they received.
    """

    default_code: ClassVar[WSErrorCode] = WSErrorCode.SESSION_ERROR

    def __init__(
        self,
        message: str,
        code: str | None = None,
        data: dict[str, Any] | None = None,
        **extra: Any,
    ) -> None:
        self.message = message
        self.code = code or self.default_code.value
        self.data = {**(data or {}), **extra}
        self.category = str(self.data.get("category") or error_category(self.code).value)
        super().__init__(f"Server error: {message} (code: {self.code})")

    @property
    def http_status(self) -> int:
        try:
            return HTTP_STATUS[WSErrorCode(self.code)]
        except ValueError:
            return 500

    def to_data(self) -> dict[str, Any]:
        """The error frame's `data`: message, code, extras and category."""
        extra = {k: v for k, v in self.data.items() if k not in ("message", "code", "category")}
        data = error_data(self.code, self.message, **extra)
        data["category"] = self.category
        return data


class InvalidRequestError(ServerError):
    """The request was malformed (bad JSON, unknown type, invalid action, too large)."""

    default_code = WSErrorCode.VALIDATION_ERROR


class InvalidActionError(InvalidRequestError):
    """Raise from reset/step when an action (or reset option) is invalid for reasons the
    Action model cannot express, e.g. outside a simulator's bounds. The client gets
    VALIDATION_ERROR (category client); `errors` follows pydantic's shape
    (`[{"loc": [...], "msg": ..., "type": ...}]`) so the offending field is named."""

    def __init__(
        self, message: str, errors: list[dict[str, Any]] | None = None, **extra: Any
    ) -> None:
        extra.setdefault("detail", message)
        super().__init__(message, errors=errors or [], **extra)


class EnvironmentExecutionError(ServerError):
    """The environment's own code raised in its reset, step or state."""

    default_code = WSErrorCode.EXECUTION_ERROR


class FactoryError(EnvironmentExecutionError):
    """The environment could not be created for a new session."""

    default_code = WSErrorCode.FACTORY_ERROR


class RewardError(ServerError):
    """The environment's rubric could not score a step (an LLM judge whose endpoint is down is
    `category == "infrastructure"`). The episode has no valid reward; never score it as 0."""

    default_code = WSErrorCode.REWARD_ERROR


class CapacityReachedError(ServerError):
    """The server had no free session slot within its queue wait."""

    default_code = WSErrorCode.CAPACITY_REACHED
    retryable = True


class SessionLostError(ServerError):
    """The server no longer holds this session (expired, reaped or unknown)."""

    default_code = WSErrorCode.SESSION_NOT_FOUND


class SessionExpiredError(SessionLostError):
    default_code = WSErrorCode.SESSION_EXPIRED


class ReplyEvictedError(ServerError):
    """A re-sent request had been applied, but the server no longer holds its reply (it keeps
    `replay_bytes` of replies per session): the step is not applied again, its outcome is lost."""

    default_code = WSErrorCode.REPLY_EVICTED


class CallTimeoutError(ServerError):
    """An environment call passed its server-side deadline (or the server shut down first).
    The server ended the session: start a new one. Infrastructure, never a reward of 0."""

    default_code = WSErrorCode.TIMEOUT


class ServerUnreachableError(OpenEnvError, ConnectionError):
    """No server answered at the URL (refused, unresolvable, handshake failed or timed out)."""

    retryable = True


class ConnectionLostError(OpenEnvError, ConnectionError):
    """The connection dropped and the session could not be resumed."""

    retryable = True


class RequestTimeoutError(OpenEnvError, TimeoutError):
    """No reply within `message_timeout_s`."""

    retryable = True


class ProtocolViolationError(OpenEnvError):
    """The peer sent something that is not a frame of this protocol."""


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


# -- starting and running environments (raised by providers and by the clients they own) -----
# Defined here, not in `openenv.providers`, so that a client can say its environment died
# without importing a provider; `openenv.providers` exports the same classes.


class ProviderError(OpenEnvError):
    """A provider could not start, reach or stop an environment (infrastructure)."""


class ProviderUnavailableError(ProviderError):
    """This provider cannot run on this machine; the message says what to install."""


class EnvironmentStartError(ProviderError):
    """The environment was started but never became healthy; its log tail is attached."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        if log_tail:
            message = f"{message}\n--- last lines of its output ---\n{log_tail}"
        super().__init__(message)
        self.log_tail = log_tail


class EnvironmentDiedError(ProviderError):
    """A started environment is gone (crashed, killed, out of memory or over its wall time)."""


#: The class a client raises for each code it receives (codes are protocol.py's).
_CLASS_BY_CODE: dict[str, type[ServerError]] = {
    WSErrorCode.INVALID_JSON.value: InvalidRequestError,
    WSErrorCode.UNKNOWN_TYPE.value: InvalidRequestError,
    WSErrorCode.VALIDATION_ERROR.value: InvalidRequestError,
    WSErrorCode.MESSAGE_TOO_LARGE.value: InvalidRequestError,
    WSErrorCode.EXECUTION_ERROR.value: EnvironmentExecutionError,
    WSErrorCode.FACTORY_ERROR.value: FactoryError,
    WSErrorCode.REWARD_ERROR.value: RewardError,
    WSErrorCode.CAPACITY_REACHED.value: CapacityReachedError,
    WSErrorCode.SESSION_ERROR.value: SessionLostError,
    WSErrorCode.SESSION_NOT_FOUND.value: SessionLostError,
    WSErrorCode.SESSION_EXPIRED.value: SessionExpiredError,
    WSErrorCode.REPLY_EVICTED.value: ReplyEvictedError,
    WSErrorCode.TIMEOUT.value: CallTimeoutError,
}


def error_from_data(data: dict[str, Any]) -> ServerError:
    """The typed exception for an error frame's `data`."""
    code = str(data.get("code", WSErrorCode.SESSION_ERROR.value))
    cls = _CLASS_BY_CODE.get(code, ServerError)
    return cls(str(data.get("message", "unknown error")), code, data)


def is_infrastructure_error(exc: BaseException) -> bool:
    """True when an episode failed for reasons outside the agent and the environment."""
    if isinstance(exc, OpenEnvError):
        return exc.category == "infrastructure"
    return isinstance(exc, (ConnectionError, TimeoutError, OSError))


def exception_message(exc: BaseException) -> str:
    """`Type: text` for logs and error frames (the type alone when there is no text)."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
