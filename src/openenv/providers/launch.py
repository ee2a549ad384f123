"""Start an environment and hand back a client that owns it.

`EnvClient.from_env`, `EnvClient.from_docker_image` (through `openenv.core.owner.start_owned`)
and `AutoEnv.from_env` (without a base URL) come here. The client is attached to a
`ProviderOwner`, core's `EnvironmentOwner` contract implemented by the provider that started
the environment. The returned `PendingClient` is what OpenEnv's factories return across
versions: `await` it for a connected async client, `async with` it, call `.sync()` for a
blocking one, or `asyncio.run()` it (a connected client that sync code may go on using).
Whichever way, closing the client stops the environment it started.
"""

from __future__ import annotations

from typing import Any, TypeVar

# `PendingClient` is core's (what the clients' factories return); it is exported here too.
from openenv.core.owner import PendingClient as PendingClient

from .base import Provider, StartedEnv
from .spec import EnvSpec

C = TypeVar("C")

#: Keyword arguments that describe the environment (the rest configure the client).
SPEC_FIELDS = frozenset({"env_vars", "limits", "network", "port", "ready_timeout_s"})
CLIENT_FIELDS = frozenset(
    {
        "connect_timeout_s",
        "message_timeout_s",
        "max_message_size_mb",
        "mode",
        "headers",
        "ping_interval_s",
        "ping_timeout_s",
        "close_timeout_s",
        "resume",
        "max_reconnect_attempts",
        "reconnect_backoff_s",
        "api_key",
    }
)


def split_kwargs(kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(spec fields, client fields); OpenEnv's `wait_timeout` is the readiness timeout."""
    spec: dict[str, Any] = {}
    client: dict[str, Any] = {}
    for key, value in kwargs.items():
        if key == "wait_timeout":
            if value is not None:
                spec["ready_timeout_s"] = float(value)
        elif key in SPEC_FIELDS:
            if value is not None:
                spec[key] = value
        elif key in CLIENT_FIELDS:
            client[key] = value
        else:
            raise TypeError(
                f"unexpected keyword argument {key!r}; environment options are "
                f"{', '.join(sorted(SPEC_FIELDS | {'wait_timeout'}))} and client options are "
                f"{', '.join(sorted(CLIENT_FIELDS))}"
            )
    return spec, client


def resolve_provider(provider: Any, default: str) -> tuple[Any, bool]:
    """(provider instance, whether we made it) from None, a name or an instance."""
    from . import get_provider

    if provider is None or isinstance(provider, str):
        return get_provider(provider or default), True
    return provider, False


class ProviderOwner:
    """The `EnvironmentOwner` of a client whose environment a provider started: the client
    asks the provider whether it still runs and for its log, and stops it on close."""

    def __init__(self, provider: Provider, env: StartedEnv) -> None:
        self.provider = provider
        self.env = env

    @property
    def label(self) -> str:
        return f"environment {self.env.id} ({self.env.spec.target})"

    async def is_running(self) -> bool:
        return await self.provider.is_running(self.env)

    async def log_tail(self, lines: int = 40) -> str:
        return await self.provider.log_tail(self.env, lines)

    async def stop(self) -> None:
        await self.provider.stop(self.env)


async def start_owned_client(
    client_cls: type[C],
    target: str,
    provider: Any,
    default_provider: str,
    kwargs: dict[str, Any],
) -> C:
    """Start `target` on `provider` and build an unconnected client that stops it on close."""
    spec_fields, client_fields = split_kwargs(kwargs)
    instance, _ = resolve_provider(provider, default_provider)
    if not isinstance(instance, Provider):
        return await _start_with_openenv_provider(
            client_cls, target, instance, spec_fields, client_fields
        )
    env: StartedEnv = await instance.start(EnvSpec.of(target, **spec_fields))
    try:
        client = client_cls(**env.client_kwargs(), **client_fields)
        client.attach_owner(ProviderOwner(instance, env))  # type: ignore[attr-defined]
    except BaseException:
        await instance.stop(env)
        raise
    return client


async def _start_with_openenv_provider(
    client_cls: type[C],
    image: str,
    provider: Any,
    spec_fields: dict[str, Any],
    client_fields: dict[str, Any],
) -> C:
    """A provider written against OpenEnv's `ContainerProvider` / `RuntimeProvider` API."""
    import asyncio

    timeout = spec_fields.pop("ready_timeout_s", 30.0)
    if hasattr(provider, "start_container"):
        base_url = await asyncio.to_thread(provider.start_container, image, **spec_fields)
        stop = provider.stop_container
        try:
            await asyncio.to_thread(provider.wait_for_ready, base_url, timeout)
        except BaseException:
            await asyncio.to_thread(stop)
            raise
    elif hasattr(provider, "start"):
        base_url = await asyncio.to_thread(provider.start, **spec_fields)
        stop = provider.stop
        try:
            await asyncio.to_thread(provider.wait_for_ready, timeout)
        except BaseException:
            await asyncio.to_thread(stop)
            raise
    else:
        raise TypeError(
            f"{type(provider).__name__} is not a provider: pass an openenv.providers.Provider, "
            "a provider name ('local', 'sandbox', 'uv', 'docker', 'swarm') or an object with "
            "OpenEnv's start_container()/stop_container() methods"
        )
    return client_cls(base_url=base_url, provider=provider, **client_fields)  # type: ignore[call-arg]


def image_for(target: str) -> str:
    """The image of an environment named by the user: an image reference stays as it is; an
    installed environment or a folder maps to the tag `openenv build` gives it
    ('echo' -> 'openenv-echo:latest')."""
    from pathlib import Path

    from openenv.auto.discovery import discover
    from openenv.core.manifest import ManifestError, load_project

    path = Path(target).expanduser()
    if path.is_dir():
        try:
            return f"{load_project(path).image_name}:latest"
        except ManifestError:
            return target
    if "/" in target or ":" in target:
        return target
    info = discover().resolve(target)
    if info is not None:
        return info.default_image
    return target
