"""`AutoAction`: the action class of an installed environment, chosen by name."""

from __future__ import annotations

from typing import Any

from .discovery import EnvInfo, discover, find_environment
from .sources import resolve

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
    """The keys OpenEnv's `get_action_info` has (`env_name`, `module`, ...) and import strings."""
    data = info.to_dict()
    return {
        **{key: data[key] for key in _ACTION_KEYS},
        "env_name": info.name,
        "module": data["module"],
    }


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
    def from_env(cls, name: str, skip_install: bool = False) -> type:
        """The action class; `skip_install=True` gives `GenericAction`, the dict action that
        pairs with `AutoEnv.from_env(..., skip_install=True)`."""
        if skip_install:
            from openenv.core.generic_client import GenericAction

            return GenericAction
        hint = "Or pass skip_install=True to build plain-dict GenericActions."
        return resolve(name, hint=hint)[0].load_action_class()

    @classmethod
    def from_hub(cls, env_name: str, skip_install: bool = False) -> type:
        """`from_env` under OpenEnv's other name; a Hub repository id works offline when its
        package is installed or the Space is in the local Hub cache."""
        return cls.from_env(env_name, skip_install=skip_install)

    @classmethod
    def get_action_info(cls, name: str) -> dict[str, Any]:
        """Import strings and class names of the action and observation, without importing."""
        return _action_info(find_environment(name))

    @classmethod
    def list_actions(cls) -> list[dict[str, Any]]:
        """Print the action of every installed environment, as OpenEnv does, and return them
        sorted by key."""
        found = discover().environments
        listed = [_action_info(found[key]) for key in sorted(found)]
        rule = "-" * 70
        lines = ["Actions of the installed OpenEnv environments:", rule]
        lines += [f"  {a['env_key']:<15}: {a['action']}" for a in listed] or ["  none"]
        print("\n".join([*lines, rule, f"Total: {len(listed)}"]))
        return listed
