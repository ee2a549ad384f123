"""What a fleet raises. Every one is an infrastructure failure: drop or retry the episode,
never score it."""

from __future__ import annotations

from openenv.core.errors import OpenEnvError
from openenv.providers.base import EnvironmentDiedError


class FleetError(OpenEnvError):
    """The fleet could not give or keep a session (closed, no server could start)."""

    category = "infrastructure"


class FleetFullError(FleetError):
    """Every server's sessions were taken for the whole wait: the trainer asked for more
    sessions than the fleet may hold. Raise `max_servers` or release sessions sooner."""

    retryable = True


class ServerLostError(EnvironmentDiedError):
    """The server holding this session died mid-episode. The fleet replaces the server; the
    episode is lost and must not be scored (the slot needs `reset()` on a new session)."""

    category = "infrastructure"
    retryable = True


class NeedsResetError(OpenEnvError):
    """A vector slot whose episode ended or failed was stepped before `reset()`."""

    category = "client"
