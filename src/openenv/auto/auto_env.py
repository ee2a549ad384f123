"""`AutoEnv`: the typed client of an installed environment, chosen by name."""

from __future__ import annotations

import logging
from typing import Any, Optional

from .discovery import discover, find_environment
from .errors import AutoEnvError, BaseURLRequiredError, EnvironmentNotFoundError

logger = logging.getLogger("openenv.auto")


class AutoEnv:
    """Factory: `AutoEnv.from_env("echo")` starts the echo environment and returns an `EchoEnv`
    that owns it; `AutoEnv.from_env("echo", base_url=...)` connects to a running one.

    Names may be written as 'echo', 'echo_env' or 'openenv-echo', in any case, with '-' or '_'.
    """

    def __init__(self) -> None:
        raise TypeError(
            "AutoEnv is a factory and cannot be instantiated; use "
            "AutoEnv.from_env(name) to get a client."
        )

    @classmethod
    def from_env(
        cls,
        name: str,
        base_url: Optional[str] = None,
        docker_image: Optional[str] = None,
        container_provider: Any = None,
        wait_timeout: Optional[float] = None,
        env_vars: Optional[dict[str, str]] = None,
        trust_remote_code: bool = False,
        skip_install: bool = False,
        *,
        provider: Any = None,
        **kwargs: Any,
    ) -> Any:
        """An async client (`EnvClient`) for `name`; use `async with` or `.sync()`.

        With `base_url`, the client drives the server there. Without it, the environment is
        started for you (the local provider by default; `provider=` picks another, and
        `docker_image=` / `container_provider=` run a container) and stopped when the client
        closes. Not installed (or `skip_install=True`) with a `base_url`: a `GenericEnvClient`
        that speaks plain dicts. Other keyword arguments configure the environment
        (`limits`, `network`, `port`) or the client (`message_timeout_s`, ...).
        """
        from openenv.providers.launch import split_kwargs

        del trust_remote_code  # nothing is ever installed from a remote here
        spec_fields, client_kwargs = split_kwargs(
            {"wait_timeout": wait_timeout, "env_vars": env_vars, **kwargs}
        )
        if base_url is not None:
            if spec_fields.keys() - {"ready_timeout_s", "env_vars"}:
                raise AutoEnvError(
                    f"{sorted(spec_fields)} configure an environment this call starts; with "
                    "base_url the environment is already running"
                )
            return cls._client_at(name, base_url, skip_install, client_kwargs)
        if docker_image is not None or container_provider is not None:
            image = docker_image or find_environment(name).default_image
            client_cls = _generic_class() if skip_install else cls._client_class_or_generic(name)
            return _start(
                client_cls, image, container_provider, "docker", spec_fields, client_kwargs
            )
        if skip_install:
            raise BaseURLRequiredError(
                f"AutoEnv.from_env({name!r}, skip_install=True) needs base_url (or docker_image=):"
                " without the package installed there is nothing to start locally."
            )
        try:
            info = find_environment(name)
        except EnvironmentNotFoundError as exc:
            raise EnvironmentNotFoundError(
                f"{exc} Or, if the environment is running somewhere, pass its base_url to "
                "drive it with GenericEnvClient.",
                name=exc.name,
                installed=exc.installed,
            ) from None
        return _start(info.load_client_class(), name, provider, "local", spec_fields, client_kwargs)

    @classmethod
    def _client_at(
        cls, name: str, base_url: str, skip_install: bool, client_kwargs: dict[str, Any]
    ) -> Any:
        if skip_install:
            logger.info("skip_install=True: GenericEnvClient for %r at %s", name, base_url)
            return _generic_class()(base_url=base_url, **client_kwargs)
        try:
            info = find_environment(name)
        except EnvironmentNotFoundError as exc:
            logger.warning(
                "%s Falling back to GenericEnvClient at %s: observations and states are plain "
                "dicts.",
                exc,
                base_url,
            )
            return _generic_class()(base_url=base_url, **client_kwargs)
        return info.load_client_class()(base_url=base_url, **client_kwargs)

    @classmethod
    def _client_class_or_generic(cls, name: str) -> type:
        try:
            return find_environment(name).load_client_class()
        except EnvironmentNotFoundError:
            return _generic_class()

    @classmethod
    def get_env_class(cls, name: str) -> type:
        """The typed client class of an installed environment (imports it)."""
        return find_environment(name).load_client_class()

    @classmethod
    def get_env_info(cls, name: str) -> dict[str, Any]:
        """What discovery knows about `name`, without importing the environment."""
        return find_environment(name).to_dict()

    @classmethod
    def list_environments(cls) -> list[dict[str, Any]]:
        """Every installed environment, sorted by key."""
        found = discover().environments
        return [found[key].to_dict() for key in sorted(found)]


def _generic_class() -> type:
    from openenv.core.generic_client import GenericEnvClient

    return GenericEnvClient


def _start(
    client_cls: type,
    target: str,
    provider: Any,
    default: str,
    spec_fields: dict[str, Any],
    client_kwargs: dict[str, Any],
) -> Any:
    """Start the environment now (blocking) and return an unconnected client that owns it, so
    the caller may use it from any event loop."""
    from openenv.core.utils import run_coroutine_sync
    from openenv.providers.launch import start_owned_client

    return run_coroutine_sync(
        start_owned_client(client_cls, target, provider, default, {**spec_fields, **client_kwargs})
    )
