"""`GenericEnvClient`: drive any environment with plain dicts, no typed models needed."""

from __future__ import annotations

from typing import Any

from .env_client import EnvClient


class GenericAction(dict):
    """An action as a plain dict: `GenericAction(type="call_tool", tool_name="x")`."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)


class GenericEnvClient(EnvClient[dict, dict, dict]):
    """Observations and states come back as dicts; actions may be dicts or models."""

    action_type = None
    observation_type = None
    state_type = None
