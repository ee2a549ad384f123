"""`AutoEnv`: the typed client of an installed environment, chosen by name."""

from __future__ import annotations

import logging
from typing import Any, Optional

from openenv._install import pip_install, shown_path, source_checkout

from .discovery import discover, find_environment
from .errors import AutoEnvError, BaseURLRequiredError
from .sources import resolve

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

        `name` is an installed environment ('echo'), an environment folder ('./my_env', in
        OpenEnv's flat layout or a package folder), or a Hub repository ('owner/echo_env'),
        which must be installed or in the local Hub cache: nothing is downloaded.

        With `base_url`, the client drives the server there. Without it, the environment is
        started for you (the local provider by default; `provider=` picks another, and
        `docker_image=` / `container_provider=` run a container) and stopped when the client
        closes. `skip_install=True` with a `base_url` (or an image) gives a `GenericEnvClient`
        that speaks plain dicts. An unknown name raises `EnvironmentNotFoundError` (a
        `ValueError`, as in OpenEnv), with or without `base_url`. Other keyword arguments
        configure the environment (`limits`, `network`, `port`) or the client
        (`message_timeout_s`, ...).
        """
        from openenv.providers.launch import split_kwargs

        del trust_remote_code  # nothing is ever installed from a remote here
        spec_fields, client_kwargs = split_kwargs(
            {"wait_timeout": wait_timeout, "env_vars": env_vars, **kwargs}
        )
        if base_url is not None and spec_fields.keys() - {"ready_timeout_s", "env_vars"}:
            raise AutoEnvError(
                f"{sorted(spec_fields)} configure an environment this call starts; with "
                "base_url the environment is already running"
            )
        if skip_install:
            if base_url is not None:
                logger.info("skip_install=True: GenericEnvClient for %r at %s", name, base_url)
                return _generic_class()(base_url=base_url, **client_kwargs)
            if docker_image is not None:
                return _start(
                    _generic_class(),
                    docker_image,
                    container_provider,
                    "docker",
                    spec_fields,
                    client_kwargs,
                )
            raise BaseURLRequiredError(
                f"AutoEnv.from_env({name!r}, skip_install=True) needs base_url (or docker_image=):"
                " without the package installed there is nothing to start locally."
            )
        hint = (
            "Or, if the environment is running somewhere, pass its base_url with "
            "skip_install=True to drive it with GenericEnvClient."
        )
        info, folder = resolve(name, hint=hint)
        client_cls = info.load_client_class()
        if base_url is not None:
            return client_cls(base_url=base_url, **client_kwargs)
        if docker_image is not None or container_provider is not None:
            image = docker_image or info.default_image
            return _start(
                client_cls, image, container_provider, "docker", spec_fields, client_kwargs
            )
        target = str(folder) if folder is not None else info.env_key
        return _start(client_cls, target, provider, "local", spec_fields, client_kwargs)

    @classmethod
    def from_hub(
        cls,
        name: str,
        base_url: Optional[str] = None,
        docker_image: Optional[str] = None,
        container_provider: Any = None,
        wait_timeout: Optional[float] = None,
        env_vars: Optional[dict[str, str]] = None,
        trust_remote_code: bool = False,
        skip_install: bool = False,
        **kwargs: Any,
    ) -> Any:
        """`from_env` under OpenEnv's other name: the same arguments and behaviour.

        A Hub repository id works offline when its package is installed or the Space is in
        the local Hub cache; otherwise `HubUnavailableError` (a `ValueError`) says so.
        """
        return cls.from_env(
            name,
            base_url=base_url,
            docker_image=docker_image,
            container_provider=container_provider,
            wait_timeout=wait_timeout,
            env_vars=env_vars,
            trust_remote_code=trust_remote_code,
            skip_install=skip_install,
            **kwargs,
        )

    @classmethod
    def get_env_class(cls, name: str) -> type:
        """The typed client class of an environment (imports it); names as for `from_env`."""
        return resolve(name)[0].load_client_class()

    @classmethod
    def get_env_info(cls, name: str) -> dict[str, Any]:
        """What discovery knows about `name`, without importing the environment."""
        return find_environment(name).to_dict()

    @classmethod
    def list_environments(cls) -> list[dict[str, Any]]:
        """Print every installed environment, as OpenEnv does, and return them sorted by key."""
        found = discover().environments
        listed = [found[key].to_dict() for key in sorted(found)]
        print(_listing(listed))
        return listed


def _listing(listed: list[dict[str, Any]]) -> str:
    rule = "-" * 70
    lines = ["Installed OpenEnv environments:", rule]
    for info in listed:
        lines.append(f"  {info['env_key']:<15}: {info['description'] or info['name']}")
        lines.append(f"  {'':<15}  {info['distribution']} {info['version']}, {info['client']}")
    if not listed:
        checkout = source_checkout()
        where = f"{shown_path(checkout / 'envs')}/<name>_env" if checkout else "PATH/TO/<name>_env"
        lines.append(f"  none: install one with `{pip_install()} -e {where}`")
    lines += [rule, f"Total: {len(listed)} environment{'' if len(listed) == 1 else 's'}"]
    return "\n".join(lines)


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
