"""`AutoEnv`: the typed client of an installed environment, chosen by name."""

from __future__ import annotations

import logging
from typing import Any, Optional

from .discovery import discover, find_environment
from .errors import AutoEnvError, BaseURLRequiredError, EnvironmentNotFoundError

logger = logging.getLogger("openenv.auto")


def _serve_hint(name: str, package: Optional[str] = None) -> str:
    target = package or name
    return (
        f"start the environment (e.g. `openenv serve {target} --port 8000`) and pass "
        "base_url='http://localhost:8000'; starting containers or processes automatically "
        "is not supported yet"
    )


class AutoEnv:
    """Factory: `AutoEnv.from_env("echo", base_url=...)` returns an `EchoEnv`.

    Names may be written as 'echo', 'echo_env' or 'openenv-echo', in any case, with '-' or '_'.
    """

    def __init__(self) -> None:
        raise TypeError(
            "AutoEnv is a factory and cannot be instantiated; use "
            "AutoEnv.from_env(name, base_url=...) to get a client."
        )

    @classmethod
    def from_env(
        cls,
        name: str,
        base_url: Optional[str] = None,
        *,
        skip_install: bool = False,
        docker_image: Optional[str] = None,
        container_provider: Any = None,
        **client_kwargs: Any,
    ) -> Any:
        """An async client (`EnvClient`) for `name` at `base_url`; use `async with` or `.sync()`.

        Not installed (or `skip_install=True`) with a `base_url`: a `GenericEnvClient` that
        speaks plain dicts. `client_kwargs` go to the client's constructor.
        """
        if docker_image is not None or container_provider is not None:
            raise AutoEnvError(
                "AutoEnv cannot start containers yet: run the image yourself "
                f"(`docker run -p 8000:8000 {docker_image or '<image>'}`) and pass "
                "base_url='http://localhost:8000'."
            )
        if skip_install:
            if base_url is None:
                raise BaseURLRequiredError(
                    f"AutoEnv.from_env({name!r}, skip_install=True) needs base_url: "
                    f"{_serve_hint(name)}."
                )
            logger.info("skip_install=True: GenericEnvClient for %r at %s", name, base_url)
            return _generic(base_url, client_kwargs)
        try:
            info = find_environment(name)
        except EnvironmentNotFoundError as exc:
            if base_url is None:
                raise EnvironmentNotFoundError(
                    f"{exc} Or, if the environment is running somewhere, pass its base_url to "
                    "drive it with GenericEnvClient.",
                    name=exc.name,
                    installed=exc.installed,
                ) from None
            logger.warning(
                "%s Falling back to GenericEnvClient at %s: observations and states are plain "
                "dicts.",
                exc,
                base_url,
            )
            return _generic(base_url, client_kwargs)
        if base_url is None:
            raise BaseURLRequiredError(
                f"AutoEnv.from_env({name!r}) needs base_url: {_serve_hint(name, info.package)}."
            )
        return info.load_client_class()(base_url=base_url, **client_kwargs)

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


def _generic(base_url: str, client_kwargs: dict[str, Any]) -> Any:
    from openenv.core.generic_client import GenericEnvClient

    return GenericEnvClient(base_url=base_url, **client_kwargs)
