"""OpenEnv's provider API (`openenv.core.containers.runtime`), for code written against it.

`ContainerProvider` and `RuntimeProvider` are the one-environment-per-instance interfaces user
code subclasses; clients accept such providers (`from_docker_image(image, provider=mine)`). The
concrete providers are this project's (`openenv.providers`), which implement both these methods
and the async many-environment interface.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from openenv.providers.docker import DockerProvider as LocalDockerProvider
    from openenv.providers.swarm import DockerSwarmProvider
    from openenv.providers.uv import UVProvider


def _poll_health(base_url: str, timeout_s: float) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base_url}/health", timeout=2.0, trust_env=False).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{base_url} did not become healthy within {timeout_s:g} s")


class ContainerProvider(ABC):
    """Starts one container-like environment from an image and returns its base URL."""

    @abstractmethod
    def start_container(
        self,
        image: str,
        port: Optional[int] = None,
        env_vars: Optional[dict[str, str]] = None,
        **kwargs: Any,
    ) -> str: ...

    @abstractmethod
    def stop_container(self) -> None: ...

    def wait_for_ready(self, base_url: str, timeout_s: float = 30.0) -> None:
        _poll_health(base_url, timeout_s)

    def close(self) -> None:
        return None

    def __enter__(self) -> ContainerProvider:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class RuntimeProvider(ABC):
    """Starts one environment process (no image) and returns its base URL."""

    @abstractmethod
    def start(
        self, port: Optional[int] = None, env_vars: Optional[dict[str, str]] = None, **kwargs: Any
    ) -> str: ...

    @abstractmethod
    def stop(self) -> None: ...

    @abstractmethod
    def wait_for_ready(self, timeout_s: float = 30.0) -> None: ...

    def __enter__(self) -> RuntimeProvider:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


_LAZY = {
    "LocalDockerProvider": ("openenv.providers.docker", "LocalDockerProvider"),
    "DockerSwarmProvider": ("openenv.providers.swarm", "DockerSwarmProvider"),
    "UVProvider": ("openenv.providers.uv", "UVProvider"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ContainerProvider",
    "DockerSwarmProvider",
    "LocalDockerProvider",
    "RuntimeProvider",
    "UVProvider",
]
