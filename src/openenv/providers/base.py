"""The provider interface: start an environment from a spec, wait for it, stop it, list it.

A provider is async and may hold many environments at once. Each started environment is a
`StartedEnv` (where to reach it, what it is, who owns it). Clients built by `from_env` /
`from_docker_image` own the environment they started and stop it when they close.

OpenEnv's one-environment-per-provider methods (`start_container`, `stop_container`,
`wait_for_ready`, `start`, `stop`) are kept on every provider, so code written for OpenEnv's
`ContainerProvider` / `RuntimeProvider` runs unchanged.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import signal
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional, TypeVar

# The errors live in core (a client raises EnvironmentDiedError); they are exported here too.
from openenv.core.errors import EnvironmentDiedError as EnvironmentDiedError
from openenv.core.errors import EnvironmentStartError, ProviderError, ProviderUnavailableError
from openenv.core.utils import run_coroutine_sync

from .ownership import Owner
from .spec import EnvSpec

logger = logging.getLogger("openenv.providers")

T = TypeVar("T")


@dataclass
class StartedEnv:
    """One running environment, as its provider started it."""

    id: str
    provider: str
    spec: EnvSpec
    #: HTTP base URL; with `unix_socket`, the host part is only a name.
    base_url: str
    owner: Owner
    unix_socket: Optional[str] = None
    created_at: float = field(default_factory=time.time)
    #: Provider facts shown by `openenv ps` (pid, container id, isolation in force, ...).
    info: dict[str, Any] = field(default_factory=dict)
    #: HTTP headers every request to it needs (a cloud sandbox's access token).
    headers: dict[str, str] = field(default_factory=dict)

    def client_kwargs(self) -> dict[str, Any]:
        """What an `EnvClient` needs to reach this environment."""
        kwargs: dict[str, Any] = {"base_url": self.base_url}
        if self.unix_socket:
            kwargs["unix_socket"] = self.unix_socket
        if self.headers:
            kwargs["headers"] = dict(self.headers)
        return kwargs


@dataclass
class Resource:
    """Something a provider kind started, as `openenv ps` lists it (any owner)."""

    id: str
    provider: str
    target: str
    owner: Optional[Owner]
    #: False: the owner is gone (an orphan); None: unknown (another machine).
    owner_alive: Optional[bool]
    running: bool
    created_at: float
    address: str = ""

    @property
    def orphaned(self) -> bool:
        return self.owner is None or self.owner_alive is False


class Provider(ABC):
    """Starts, watches and stops environments. Subclasses implement `_start` and `_stop`."""

    #: Short name used by `openenv ps` and in resource labels.
    name: ClassVar[str] = "provider"
    #: Network policy used when a spec does not choose one.
    default_network: ClassVar[str] = "egress"
    #: What a spec's target names for this provider: "app" (an environment name, folder or
    #: import string) or "image" (container providers; names and folders map to their image).
    target_kind: ClassVar[str] = "app"
    #: Environment creations per second the provider's service allows (cloud sandboxes cap
    #: them); `EnvFleet` honours the lower of this and its own limit. None: no cap.
    max_creates_per_s: ClassVar[Optional[float]] = None
    #: While a start waits for `/health`, ask `_alive` at most once per this many seconds (a
    #: provider whose liveness check is a call to an engine or a remote API sets it: otherwise
    #: every failed probe would cost one such call).
    liveness_interval_s: ClassVar[float] = 0.0

    def __init__(self) -> None:
        self._started: dict[str, StartedEnv] = {}
        self._compat_env: Optional[StartedEnv] = None

    # -- availability ----------------------------------------------------------------------

    @classmethod
    def check_available(cls) -> None:
        """Raise `ProviderUnavailableError` (one line, with what to install) if unusable here."""
        return None

    @classmethod
    def available(cls) -> bool:
        try:
            cls.check_available()
        except ProviderUnavailableError:
            return False
        return True

    # -- every resource of this kind, for `openenv ps` / `openenv gc` -------------------------

    @classmethod
    def resources(cls) -> list[Resource]:
        """Everything of this provider's kind on this machine, whoever started it."""
        return []

    @classmethod
    def remove_resource(cls, resource: Resource) -> None:
        """Stop and delete one resource listed by `resources()`."""
        raise NotImplementedError

    @classmethod
    def collect_orphans(cls, *, dry_run: bool = False) -> list[Resource]:
        """Remove resources whose owner is gone; returns them. Providers run this on their first
        start in each process, so a crashed trainer's leftovers go at the next run."""
        if not cls.available():
            return []
        doomed = cls._collectable()
        if not dry_run:
            for resource in doomed:
                try:
                    cls.remove_resource(resource)
                except Exception as exc:  # one stuck resource must not stop the sweep
                    logger.warning("could not remove %s %s: %s", cls.name, resource.id, exc)
        return doomed

    @classmethod
    def _collectable(cls) -> list[Resource]:
        """What `collect_orphans` removes: resources whose owner is gone (providers that
        enforce a wall time add those past it)."""
        return [r for r in cls.resources() if r.orphaned]

    # -- the interface ---------------------------------------------------------------------

    async def start(self, spec: EnvSpec | str, *, wait: bool = True, **fields: Any) -> StartedEnv:
        """Start the environment `spec` describes; with `wait`, return once `/health` answers.

        A start that fails part-way leaves nothing behind: what was created is stopped.
        """
        spec = EnvSpec.of(spec, **fields)
        if self.target_kind == "image":
            from .launch import image_for

            spec = spec.model_copy(update={"target": image_for(spec.target)})
        self.check_available()
        _live_providers.add(self)
        _install_exit_cleanup()
        if type(self) not in _swept:
            _swept.add(type(self))
            await run_blocking(type(self).collect_orphans)
        env = await self._start(spec)
        self._started[env.id] = env
        if wait:
            try:
                await self.wait_ready(env, spec.ready_timeout_s)
            except BaseException:
                with contextlib.suppress(Exception):
                    await self.stop(env)
                raise
        logger.debug("%s started %s (%s)", self.name, env.id, spec.target)
        return env

    async def stop(self, env: StartedEnv | str) -> None:
        """Stop an environment and everything it started; safe to call twice."""
        env_id = env if isinstance(env, str) else env.id
        started = self._started.pop(env_id, None)
        if started is None and isinstance(env, StartedEnv):
            started = env
        if started is not None:
            await self._stop(started)

    def started(self) -> list[StartedEnv]:
        """What this provider started and has not stopped."""
        return list(self._started.values())

    async def close(self) -> None:
        """Stop everything this provider started."""
        for env in list(self._started.values()):
            with contextlib.suppress(Exception):
                await self.stop(env)

    async def is_running(self, env: StartedEnv) -> bool:
        """False once the environment is gone; used to tell a dead environment from a blip."""
        return await self._alive(env)

    async def health_status(self, env: StartedEnv) -> Optional[int]:
        """The HTTP status of the environment's `/health` now (None when nothing answers)."""
        return await self._probe(env)

    async def wait_ready(self, env: StartedEnv, timeout_s: float = 60.0) -> None:
        """Poll `/health` until it answers 200; fail early if the environment died."""
        deadline = time.monotonic() + timeout_s
        delay = 0.005
        knows_liveness = type(self)._alive is not Provider._alive
        next_liveness_check = 0.0
        while True:
            status = await self._probe(env)
            if status == 200:
                return
            check_liveness = (
                status is None and knows_liveness and time.monotonic() >= next_liveness_check
            )
            if check_liveness:
                next_liveness_check = time.monotonic() + self.liveness_interval_s
            if check_liveness and not await self._alive(env):
                raise EnvironmentStartError(
                    f"{self.name}: environment {spec_name(env)} exited before it was ready",
                    await self.log_tail(env),
                )
            if time.monotonic() >= deadline:
                raise EnvironmentStartError(
                    f"{self.name}: environment {spec_name(env)} not healthy after {timeout_s:g} s "
                    f"at {env.unix_socket or env.base_url}; raise ready_timeout_s if it starts "
                    "slowly",
                    await self.log_tail(env),
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._max_probe_interval())

    async def log_tail(self, env: StartedEnv, lines: int = 40) -> str:
        """The last lines the environment printed, for error messages."""
        return ""

    def _max_probe_interval(self) -> float:
        """The longest wait between two `/health` probes while an environment starts (the
        interval doubles from 5 ms up to this)."""
        return 0.25

    # -- for subclasses --------------------------------------------------------------------

    @abstractmethod
    async def _start(self, spec: EnvSpec) -> StartedEnv: ...

    @abstractmethod
    async def _stop(self, env: StartedEnv) -> None: ...

    async def _alive(self, env: StartedEnv) -> bool:
        """Whether the environment's process/container still exists. Providers that can ask
        their engine override this; the fallback asks the server itself."""
        return await self._probe(env) is not None

    async def _probe(self, env: StartedEnv) -> Optional[int]:
        """HTTP status of `/health`, None when nothing answers."""
        import httpx

        transport = (
            httpx.AsyncHTTPTransport(uds=env.unix_socket, verify=False) if env.unix_socket else None
        )
        try:
            # verify=False: health is probed over plain HTTP, and building a TLS context per
            # probe would cost more than the probe.
            async with httpx.AsyncClient(
                transport=transport, timeout=2.0, trust_env=False, verify=False
            ) as http:
                response = await http.get(env.base_url + "/health", headers=env.headers)
                return response.status_code
        except httpx.HTTPError:
            return None

    # -- OpenEnv's one-environment methods ---------------------------------------------------

    def start_container(
        self,
        image: str,
        port: Optional[int] = None,
        env_vars: Optional[dict[str, str]] = None,
        **kwargs: Any,
    ) -> str:
        """OpenEnv's `ContainerProvider.start_container`: start one environment, return its URL.

        `wait_timeout` is honoured as the readiness timeout (OpenEnv forwarded it nowhere)."""
        timeout = kwargs.pop("wait_timeout", None)
        fields: dict[str, Any] = {"port": port, "env_vars": dict(env_vars or {})}
        if timeout is not None:
            fields["ready_timeout_s"] = float(timeout)
        fields.update(kwargs)
        env = run_coroutine_sync(self.start(image, wait=False, **fields))
        self._compat_env = env
        return env.base_url

    def wait_for_ready(self, base_url: Optional[str] = None, timeout_s: float = 30.0) -> None:
        env = self._compat_env
        if env is None:
            raise ProviderError("wait_for_ready() before start_container()/start()")
        try:
            run_coroutine_sync(self.wait_ready(env, timeout_s))
        except EnvironmentStartError as exc:
            raise TimeoutError(str(exc)) from exc

    def stop_container(self) -> None:
        env, self._compat_env = self._compat_env, None
        if env is not None:
            run_coroutine_sync(self.stop(env))

    def __enter__(self) -> Provider:
        return self

    def __exit__(self, *exc: Any) -> None:
        run_coroutine_sync(self.close())

    async def __aenter__(self) -> Provider:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


#: Provider classes whose orphans were collected in this process.
_swept: set[type[Provider]] = set()
#: Providers that started something in this process, stopped at exit. Strong references: a
#: trainer that drops its client without closing it still gets its environments stopped.
_live_providers: set[Provider] = set()
_exit_cleanup_installed = False


_exiting = False


async def run_blocking(fn: Callable[..., T], *args: Any) -> T:
    """`asyncio.to_thread`, except at interpreter exit, where no new thread may start: there
    the call runs inline (the exit cleanup is the only thing left to do)."""
    if _exiting:
        return fn(*args)
    return await asyncio.to_thread(fn, *args)


def _stop_everything_at_exit() -> None:
    global _exiting
    _exiting = True
    for provider in list(_live_providers):
        if provider.started():
            with contextlib.suppress(BaseException):
                run_coroutine_sync(provider.close())


def _install_exit_cleanup() -> None:
    """Stop what providers started when the trainer exits: normally, on an exception, on
    Ctrl-C, or on SIGTERM (whose default action would skip every cleanup; it becomes a normal
    exit with status 143 when no one else handles it). SIGKILL leaves orphans for the next
    provider start or `openenv gc`."""
    global _exit_cleanup_installed
    if _exit_cleanup_installed:
        return
    _exit_cleanup_installed = True
    atexit.register(_stop_everything_at_exit)
    if threading.current_thread() is threading.main_thread():
        with contextlib.suppress(ValueError, OSError):
            if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
                signal.signal(signal.SIGTERM, _exit_on_sigterm)


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def _forget_in_forked_child() -> None:
    """A forked copy of the trainer does not own its parent's environments: its exit must not
    stop them."""
    _live_providers.clear()


os.register_at_fork(after_in_child=_forget_in_forked_child)


def spec_name(env: StartedEnv) -> str:
    return f"{env.spec.target!r} ({env.id})"
