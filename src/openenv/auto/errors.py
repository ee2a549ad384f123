"""Errors and warnings of environment discovery and the `AutoEnv`/`AutoAction` factories."""

from __future__ import annotations


class AutoEnvError(Exception):
    """Base class: something `AutoEnv`/`AutoAction` could not do, with what to do instead."""


class EnvironmentNotFoundError(AutoEnvError, ValueError, LookupError):
    """No installed environment package answers to the requested name.

    A `ValueError`, as OpenEnv raises for an unknown name, and a `LookupError`, as earlier
    versions of this package did, so both kinds of `except` keep working.
    """

    def __init__(self, message: str, name: str, installed: list[str]) -> None:
        super().__init__(message)
        self.name = name
        self.installed = installed


class EnvironmentImportError(AutoEnvError, ImportError):
    """An environment is installed but its client, action or observation class does not import."""


class HubUnavailableError(AutoEnvError, ValueError):
    """A Hugging Face Hub repository was named, and neither an installed package nor a local
    copy of it exists; this package never downloads or installs code from the Hub itself."""

    def __init__(self, message: str, repo_id: str) -> None:
        super().__init__(message)
        self.repo_id = repo_id


class BaseURLRequiredError(AutoEnvError, ValueError):
    """No server address was given and this version cannot start one by itself."""


class DiscoveryWarning(UserWarning):
    """An `openenv-*` package was skipped during discovery; the message says why."""
