"""Errors and warnings of environment discovery and the `AutoEnv`/`AutoAction` factories."""

from __future__ import annotations


class AutoEnvError(Exception):
    """Base class: something `AutoEnv`/`AutoAction` could not do, with what to do instead."""


class EnvironmentNotFoundError(AutoEnvError, LookupError):
    """No installed environment package answers to the requested name."""

    def __init__(self, message: str, name: str, installed: list[str]) -> None:
        super().__init__(message)
        self.name = name
        self.installed = installed


class EnvironmentImportError(AutoEnvError, ImportError):
    """An environment is installed but its client, action or observation class does not import."""


class BaseURLRequiredError(AutoEnvError, ValueError):
    """No server address was given and this version cannot start one by itself."""


class DiscoveryWarning(UserWarning):
    """An `openenv-*` package was skipped during discovery; the message says why."""
