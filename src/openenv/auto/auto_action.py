"""`AutoAction`: the action class of an installed environment, chosen by name."""

from __future__ import annotations

from typing import Any

from .discovery import EnvInfo, discover, find_environment

_ACTION_KEYS = (
    "env_key",
    "name",
    "package",
    "action",
    "action_class",
    "observation",
    "observation_class",
)


def _action_info(info: EnvInfo) -> dict[str, Any]:
    data = info.to_dict()
    return {key: data[key] for key in _ACTION_KEYS}


class AutoAction:
    """Factory: `AutoAction.from_env("grid_world")` returns `GridWorldAction`.

    MCP environments such as echo answer with `CallToolAction`.
    """

    def __init__(self) -> None:
        raise TypeError(
            "AutoAction is a factory and cannot be instantiated; use "
            "AutoAction.from_env(name) to get an action class."
        )

    @classmethod
    def from_env(cls, name: str, *, skip_install: bool = False) -> type:
        """The action class; `skip_install=True` gives `GenericAction`, the dict action that
        pairs with `AutoEnv.from_env(..., skip_install=True)`."""
        if skip_install:
            from openenv.core.generic_client import GenericAction

            return GenericAction
        return find_environment(
            name, hint="Or pass skip_install=True to build plain-dict GenericActions."
        ).load_action_class()

    @classmethod
    def get_action_info(cls, name: str) -> dict[str, Any]:
        """Import strings and class names of the action and observation, without importing."""
        return _action_info(find_environment(name))

    @classmethod
    def list_actions(cls) -> list[dict[str, Any]]:
        """The action of every installed environment, sorted by key."""
        found = discover().environments
        return [_action_info(found[key]) for key in sorted(found)]
