"""Server-side exceptions; each maps to one wire error code."""

from __future__ import annotations

from typing import Any

from .types import ERROR_CATEGORY, WSErrorCode


class ServerSideError(Exception):
    """An error that the server reports to the client as a typed error frame."""

    code: WSErrorCode = WSErrorCode.SESSION_ERROR
    http_status: int = 500

    def __init__(self, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.message = message
        self.extra = extra

    def to_data(self) -> dict[str, Any]:
        return error_data(self.code, self.message, **self.extra)


class ConcurrencyConfigurationError(ValueError):
    """More than one session was configured for an environment that does not support it."""


class CapacityError(ServerSideError):
    code = WSErrorCode.CAPACITY_REACHED
    http_status = 503


class FactoryError(ServerSideError):
    code = WSErrorCode.FACTORY_ERROR
    http_status = 500


class ExecutionError(ServerSideError):
    code = WSErrorCode.EXECUTION_ERROR
    http_status = 500


class SessionNotFoundError(ServerSideError):
    code = WSErrorCode.SESSION_NOT_FOUND
    http_status = 404


class SessionExpiredError(ServerSideError):
    code = WSErrorCode.SESSION_EXPIRED
    http_status = 410


class InvalidActionError(ServerSideError):
    """Raise from reset/step when an action (or reset option) is invalid for reasons the
    Action model cannot express, e.g. outside a simulator's bounds. The client gets
    VALIDATION_ERROR (category client); `errors` follows pydantic's shape
    (`[{"loc": [...], "msg": ..., "type": ...}]`) so the offending field is named."""

    code = WSErrorCode.VALIDATION_ERROR
    http_status = 422

    def __init__(self, message: str, errors: list[dict] | None = None, **extra: object) -> None:
        super().__init__(message, errors=errors or [], detail=message, **extra)


def error_data(code: WSErrorCode, message: str, **extra: Any) -> dict[str, Any]:
    """The `data` of an OpenEnv error frame, plus who is at fault (`category`)."""
    data: dict[str, Any] = {"message": message, "code": code.value}
    data.update(extra)
    data["category"] = ERROR_CATEGORY[code].value
    return data


def exception_message(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
