"""Providers start environments for a trainer, isolate them and clean them up.

    from openenv.providers import get_provider
    # or "sandbox", "uv", "docker", "swarm", "ray", "kubernetes", "daytona"
    provider = get_provider("local")
    env = await provider.start("echo")
    ...
    await provider.stop(env)

Most code never touches a provider: `EchoEnv.from_env("echo")`, `AutoEnv.from_env("echo")` and
`EchoEnv.from_docker_image(image)` start one and stop it when the client closes. Provider modules
are imported on first use (the Docker SDK is not imported by a trainer that never uses Docker).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .base import (
    EnvironmentDiedError,
    EnvironmentStartError,
    Provider,
    ProviderError,
    ProviderUnavailableError,
    Resource,
    StartedEnv,
)
from .spec import EnvSpec, NetworkPolicy, ResourceLimits, SpecError

if TYPE_CHECKING:
    from .daytona import DaytonaProvider
    from .docker import DockerProvider
    from .kubernetes import KubernetesProvider
    from .local import LocalProcessProvider
    from .ray import RayProvider
    from .sandbox import SandboxProvider
    from .swarm import DockerSwarmProvider
    from .uv import UVProvider

#: name -> "module:Class" of every provider, in the order `openenv ps` lists them.
PROVIDERS: dict[str, str] = {
    "local": "openenv.providers.local:LocalProcessProvider",
    "sandbox": "openenv.providers.sandbox:SandboxProvider",
    "uv": "openenv.providers.uv:UVProvider",
    "docker": "openenv.providers.docker:DockerProvider",
    "swarm": "openenv.providers.swarm:DockerSwarmProvider",
    "kubernetes": "openenv.providers.kubernetes:KubernetesProvider",
    "daytona": "openenv.providers.daytona:DaytonaProvider",
    "ray": "openenv.providers.ray:RayProvider",
}

DEFAULT_PROVIDER = "local"

_LAZY = {
    "LocalProcessProvider": "local",
    "SandboxProvider": "sandbox",
    "UVProvider": "uv",
    "DockerProvider": "docker",
    "DockerSwarmProvider": "swarm",
    "KubernetesProvider": "kubernetes",
    "DaytonaProvider": "daytona",
    "RayProvider": "ray",
}


def provider_class(name: str) -> type[Provider]:
    """The class registered under `name` ('local', 'docker', ...)."""
    try:
        module_name, _, attr = PROVIDERS[name].partition(":")
    except KeyError:
        raise ValueError(
            f"unknown provider {name!r}; expected one of {', '.join(PROVIDERS)}"
        ) from None
    cls: type[Provider] = getattr(importlib.import_module(module_name), attr)
    return cls


def get_provider(name: str | Provider | None = None, **kwargs: Any) -> Provider:
    """A provider instance: by name, the default ('local') for None, or `name` itself."""
    if isinstance(name, Provider):
        return name
    return provider_class(name or DEFAULT_PROVIDER)(**kwargs)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return provider_class(_LAZY[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_PROVIDER",
    "PROVIDERS",
    "DaytonaProvider",
    "DockerProvider",
    "DockerSwarmProvider",
    "EnvSpec",
    "EnvironmentDiedError",
    "EnvironmentStartError",
    "KubernetesProvider",
    "LocalProcessProvider",
    "NetworkPolicy",
    "Provider",
    "ProviderError",
    "ProviderUnavailableError",
    "RayProvider",
    "Resource",
    "ResourceLimits",
    "SandboxProvider",
    "SpecError",
    "StartedEnv",
    "UVProvider",
    "get_provider",
    "provider_class",
]
