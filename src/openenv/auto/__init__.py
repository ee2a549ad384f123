"""Find installed environments by name and build their typed clients and actions.

`AutoEnv.from_env("echo", base_url=...)` returns an `EchoEnv`; `AutoAction.from_env("echo")`
returns its action class. Discovery reads the `openenv.yaml` of every installed `openenv-*`
package and notices packages installed or removed while the process runs.
"""

from __future__ import annotations

from .auto_action import AutoAction
from .auto_env import AutoEnv
from .discovery import Discovery, EnvInfo, discover, find_environment, normalize_env_name
from .errors import (
    AutoEnvError,
    BaseURLRequiredError,
    DiscoveryWarning,
    EnvironmentImportError,
    EnvironmentNotFoundError,
    HubUnavailableError,
)

__all__ = [
    "AutoAction",
    "AutoEnv",
    "AutoEnvError",
    "BaseURLRequiredError",
    "Discovery",
    "DiscoveryWarning",
    "EnvInfo",
    "EnvironmentImportError",
    "EnvironmentNotFoundError",
    "HubUnavailableError",
    "discover",
    "find_environment",
    "normalize_env_name",
]
