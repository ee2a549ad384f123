"""Docker provider: each environment a hardened container of an image on the local engine.

Hardened by default (see `DockerProvider` for how to relax any of it): an unprivileged user
(65534:65534), every capability dropped (the bounding set is empty), no-new-privileges, a
read-only root file system with a tmpfs /tmp (and HOME=/tmp), memory/CPU/PID limits from the
spec (PIDs capped at 1024 unless the spec says otherwise), a stop timeout of 0 and labels naming
the owner. With network "egress" (the default) the container is on the default bridge and its
port is published on 127.0.0.1 only, on a host port the engine picks (no free-port race). With
network "none" it has no network at all and serves on a Unix socket in a host folder bind-mounted
at /run/openenv (`OPENENV_UNIX_SOCKET` tells the server where).

Wall time: a timer in the trainer's process removes the container when `wall_time_s` is up, and
the deadline is also a label, so `collect_orphans()` (`openenv gc`, every first start) removes an
expired container even if its owner still runs but its timer did not fire.

The image must be on the machine (`openenv build` makes one); the provider never pulls.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, Optional, TypeVar
from urllib.parse import urlsplit

from openenv import settings

from . import _docker as dk
from ._docker import docker_run_command as docker_run_command  # `openenv build` prints it
from .base import (
    EnvironmentStartError,
    Provider,
    ProviderError,
    Resource,
    StartedEnv,
    run_blocking,
)
from .ownership import Owner
from .spec import EnvSpec, ResourceLimits, SpecError

logger = logging.getLogger("openenv.providers.docker")

#: The port OpenEnv images serve on inside the container.
CONTAINER_PORT = 8000
#: "nobody:nogroup": exists (or needs not exist) in every image, owns nothing in it.
DEFAULT_USER = "65534:65534"
SOCKET_DIR_IN_CONTAINER = "/run/openenv"
SOCKET_IN_CONTAINER = SOCKET_DIR_IN_CONTAINER + "/server.sock"
_T = TypeVar("_T")
#: Engine requests of starts run here (not on the event loop's executor): a start cancelled
#: mid-creation finishes and removes its container on this pool, whatever the loop does.
_engine_threads = concurrent.futures.ThreadPoolExecutor(32, thread_name_prefix="openenv-engine")
PROBE_TIMEOUT_S = 2.0
#: Longest wait between two health probes of a start, per start being waited for at once.
PROBE_INTERVAL_PER_START_S = 0.02
#: Every start any engine provider of this process is waiting for (they may run on several
#: threads and event loops): the probe interval grows with their number.
_starts_waited_for: set[str] = set()
#: Ceilings applied when the spec leaves them unset.
DEFAULT_LIMITS = ResourceLimits.model_validate({"pids": 1024})


class EngineProvider(Provider):
    """What the Docker and Swarm providers share: wall-time timers, removal of expired and
    orphaned resources, and cancelled starts cleaned up. Subclasses list their resources in
    `_managed()` and remove one by name in `_remove()`."""

    #: Names and folders map to the image `openenv build` gives them (`launch.image_for`).
    target_kind = "image"
    #: 32 containers starting at once, each engine listing after every failed probe, made
    #: ~20,000 listings (80 s of trainer CPU and 60 s of engine CPU on 2 cores).
    liveness_interval_s = 1.0

    def __init__(self) -> None:
        super().__init__()
        self._timers: dict[str, threading.Timer] = {}
        self._pending: set[concurrent.futures.Future[Any]] = set()

    @classmethod
    def check_available(cls) -> None:
        dk.check_engine()

    @classmethod
    def _as_resource(cls, item: dk.Listed, running: bool, address: str = "") -> Resource:
        """A listed container or service as `openenv ps` shows it (owner from its labels)."""
        owner = Owner.from_labels(item.labels)
        return Resource(
            id=item.name,
            provider=cls.name,
            target=item.labels.get(dk.TARGET_LABEL, ""),
            owner=owner,
            owner_alive=owner.is_alive() if owner else None,
            running=running,
            created_at=item.created,
            address=address or ", ".join(item.published),
        )

    @classmethod
    def _managed(cls) -> list[dk.Listed]:
        raise NotImplementedError

    @classmethod
    def _remove(cls, name: str) -> None:
        raise NotImplementedError

    @classmethod
    def remove_resource(cls, resource: Resource) -> None:
        cls._remove(resource.id)

    @classmethod
    def _collectable(cls) -> list[Resource]:
        """Resources whose owner is gone, and resources past their wall time."""
        now = time.time()
        expired = {item.name for item in cls._managed() if _deadline(item.labels) < now}
        return [r for r in cls.resources() if r.orphaned or r.id in expired]

    async def _create_in_thread(self, spec: EnvSpec, name: str) -> StartedEnv:
        """Run `_create` on a worker thread. A start cancelled while the engine creates the
        resource removes it from that thread, so nothing depends on the event loop (which may be
        closed by then); `close()` waits for such removals."""
        owner = Owner.current()
        lock = threading.Lock()
        outcome = {"cancelled": False, "delivered": False}

        def run() -> Optional[StartedEnv]:
            env = self._create(spec, name, owner)
            with lock:
                if not outcome["cancelled"]:
                    outcome["delivered"] = True
                    return env
            type(self)._remove(name)  # the start was cancelled meanwhile
            return None

        work = self._submit(run)
        try:
            env = await asyncio.wrap_future(work)
        except asyncio.CancelledError:
            with lock:
                outcome["cancelled"] = True
                delivered = outcome["delivered"]
            if delivered:  # done just as the start was cancelled
                self._submit(type(self)._remove, name)
            raise
        assert env is not None
        if spec.limits.wall_time_s:
            timer = threading.Timer(spec.limits.wall_time_s, self._expire, (env,))
            timer.daemon = True
            self._timers[env.id] = timer
            timer.start()
        return env

    def _submit(self, fn: Callable[..., _T], *args: Any) -> concurrent.futures.Future[_T]:
        work = _engine_threads.submit(fn, *args)
        self._pending.add(work)
        work.add_done_callback(self._pending.discard)
        return work

    async def close(self) -> None:
        """Stop everything this provider started, and finish removals of cancelled starts."""
        await super().close()
        pending = list(self._pending)
        if pending:
            await run_blocking(concurrent.futures.wait, pending)

    def _create(self, spec: EnvSpec, name: str, owner: Owner) -> StartedEnv:
        raise NotImplementedError

    async def wait_ready(self, env: StartedEnv, timeout_s: float = 60.0) -> None:
        """As `Provider.wait_ready`, counting the starts waited for (`_max_probe_interval`)."""
        _starts_waited_for.add(env.id)
        try:
            await super().wait_ready(env, timeout_s)
        finally:
            _starts_waited_for.discard(env.id)

    def _max_probe_interval(self) -> float:
        """20 ms per start this process waits for (by any provider), at most 250 ms: a lone
        start is seen ready within ~20 ms (not up to 250 ms late), while a fleet starting at once
        keeps the probe rate (each a connection through the engine's port proxy) near 50 per
        second."""
        return min(0.25, PROBE_INTERVAL_PER_START_S * max(1, len(_starts_waited_for)))

    async def _alive(self, env: StartedEnv) -> bool:
        return await self._engine_alive(env)

    async def _engine_alive(self, env: StartedEnv) -> bool:
        raise NotImplementedError

    async def _probe(self, env: StartedEnv) -> Optional[int]:
        """The status of `GET /health` on a bare connection, None when nothing answers: what
        `Provider._probe` returns, without an HTTP client per probe (a fleet of containers
        starting at once is probed thousands of times)."""
        url = urlsplit(env.base_url)
        try:
            if env.unix_socket:
                opening = asyncio.open_unix_connection(env.unix_socket)
            else:
                opening = asyncio.open_connection(url.hostname, url.port or 80)
            reader, writer = await asyncio.wait_for(opening, PROBE_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError):
            return None
        try:
            path = (url.path.rstrip("/") + "/health").encode()
            writer.write(b"GET %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n" % path)
            line = await asyncio.wait_for(reader.readline(), PROBE_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError):
            return None
        finally:
            writer.close()
            with contextlib.suppress(OSError, asyncio.TimeoutError):
                await asyncio.wait_for(writer.wait_closed(), PROBE_TIMEOUT_S)
        parts = line.split()
        if len(parts) >= 2 and parts[0].startswith(b"HTTP/") and parts[1].isdigit():
            return int(parts[1])
        return None

    async def _stop(self, env: StartedEnv) -> None:
        timer = self._timers.pop(env.id, None)
        if timer is not None:
            timer.cancel()
        await run_blocking(type(self)._remove, env.id)

    def _expire(self, env: StartedEnv) -> None:
        """The wall time is up: remove the resource (on the timer's thread)."""
        self._timers.pop(env.id, None)
        self._started.pop(env.id, None)
        logger.info("%s: %s reached its wall time; removing it", self.name, env.id)
        try:
            type(self)._remove(env.id)
        except Exception as exc:
            logger.warning("%s: could not remove %s at its wall time: %s", self.name, env.id, exc)


class DockerProvider(EngineProvider):
    """Starts each environment as a container of the spec's image (`spec.target`).

    `user=None` keeps the image's own user (refused if that is root, unless
    `allow_root=True`); `read_only=False` gives a writable root; `tmpfs` maps extra writable
    paths to tmpfs options; `command` replaces the image's command; `container_port` is the port
    the server listens on inside; `default_limits` fills limits the spec leaves unset.
    """

    name = "docker"
    default_network = "egress"

    def __init__(
        self,
        *,
        user: Optional[str] = DEFAULT_USER,
        container_port: int = CONTAINER_PORT,
        read_only: bool = True,
        tmpfs: Optional[dict[str, str]] = None,
        command: Optional[list[str]] = None,
        default_limits: ResourceLimits = DEFAULT_LIMITS,
        allow_root: bool = False,
    ) -> None:
        super().__init__()
        if user is not None and user.split(":", 1)[0] in ("0", "root") and not allow_root:
            raise SpecError(f"user {user!r} is root; pass allow_root=True if you mean it")
        self.user = user
        self.container_port = container_port
        self.read_only = read_only
        self.tmpfs = {**dk.HARDENING["tmpfs"], **(tmpfs or {})}
        self.command = command
        self.default_limits = default_limits
        self.allow_root = allow_root

    # -- availability and listing -----------------------------------------------------------

    @classmethod
    def _listing(cls, **filters: Any) -> list[dk.Listed]:
        client = dk.engine()
        payload = dk.engine_call(
            "list containers", lambda: client.api.containers(all=True, filters=filters)
        )
        return dk.parse_containers(payload)

    @classmethod
    def _named(cls, name: str) -> list[dk.Listed]:
        return cls._listing(name=dk.name_filter(name))

    @classmethod
    def resources(cls) -> list[Resource]:
        out = []
        for item in cls._managed():
            socket_dir = item.labels.get(dk.SOCKET_DIR_LABEL)
            address = f"{socket_dir}/sock/server.sock" if socket_dir else ""
            out.append(cls._as_resource(item, item.state == "running", address))
        return out

    @classmethod
    def _managed(cls) -> list[dk.Listed]:
        return cls._listing(**dk.managed_filter(cls.name))

    @classmethod
    def _remove(cls, name: str) -> None:
        """Remove container `name` (killed at once) and its socket folder; verified by listing."""
        docker = dk.sdk()
        listed = cls._named(name)
        socket_dirs = [i.labels.get(dk.SOCKET_DIR_LABEL) for i in listed if name in i.names]
        if dk.has_name(listed, name):
            client = dk.engine()
            # Not found / removal already in progress: the listing below decides.
            with contextlib.suppress(docker.errors.APIError):
                client.api.remove_container(name, force=True, v=True)
            dk.wait_gone(lambda: cls._named(name), name)
        for folder in socket_dirs:
            dk.remove_socket_dir(folder)

    # -- start and stop ---------------------------------------------------------------------

    async def _start(self, spec: EnvSpec) -> StartedEnv:
        name = dk.resource_name("docker", spec.target, uuid.uuid4().hex[:10])
        return await self._create_in_thread(spec, name)

    def _create(self, spec: EnvSpec, name: str, owner: Owner) -> StartedEnv:
        """Create and start the container (blocking); a failure leaves nothing behind."""
        docker = dk.sdk()
        client = dk.engine()
        network = spec.network or self.default_network
        limits = self._limits(spec.limits)
        labels = {
            **owner.labels(),
            dk.PROVIDER_LABEL: self.name,
            dk.TARGET_LABEL: spec.target,
            dk.CREATED_LABEL: f"{time.time():.3f}",
        }
        if limits.wall_time_s:
            labels[dk.DEADLINE_LABEL] = f"{time.time() + limits.wall_time_s:.3f}"
        environment = {"HOME": "/tmp", **spec.env_vars}
        host_config: dict[str, Any] = {
            **dk.HARDENING,
            "read_only": self.read_only,
            "tmpfs": dict(self.tmpfs),
            "pids_limit": limits.pids,
            "init": False,
        }
        if limits.memory_mb:
            host_config["mem_limit"] = limits.memory_mb * 1024 * 1024
            host_config["memswap_limit"] = limits.memory_mb * 1024 * 1024
        if limits.cpus:
            host_config["nano_cpus"] = int(limits.cpus * 1e9)
        socket_parent = socket_dir = None
        ports: Optional[list[int]] = None
        if network == "none":
            socket_parent, socket_dir = dk.make_socket_dir()
            labels[dk.SOCKET_DIR_LABEL] = str(socket_parent)
            environment[settings.UNIX_SOCKET.name] = SOCKET_IN_CONTAINER
            host_config["network_mode"] = "none"
            host_config["binds"] = {
                str(socket_dir): {"bind": SOCKET_DIR_IN_CONTAINER, "mode": "rw"}
            }
        else:
            ports = [self.container_port]
            host_config["port_bindings"] = {self.container_port: ("127.0.0.1", spec.port)}
        try:
            config = client.api.create_host_config(**host_config)
            try:
                created = client.api.create_container(
                    spec.target,
                    command=self.command,
                    name=name,
                    user=self.user or "",
                    environment=environment,
                    labels=labels,
                    ports=ports,
                    host_config=config,
                    stop_timeout=0,
                    detach=True,
                    use_config_proxy=False,
                )
            except docker.errors.ImageNotFound:
                raise SpecError(
                    f"docker: image {spec.target!r} is not on this machine; build it "
                    "(`openenv build ENV_FOLDER --tag ...`) or pull it (`docker pull`)"
                ) from None
            except docker.errors.APIError as exc:
                raise ProviderError(
                    f"docker: could not create a container of {spec.target!r}: {exc}"
                ) from exc
            container_id = created["Id"]
            dk.engine_call(f"start container {name}", lambda: client.api.start(container_id))
            info = dk.engine_call(
                f"inspect container {name}", lambda: client.api.inspect_container(container_id)
            )
            if self.user is None and not self.allow_root:
                image_user = info.get("Config", {}).get("User") or ""
                if image_user.split(":", 1)[0] in ("", "0", "root"):
                    raise SpecError(
                        f"docker: image {spec.target!r} runs as root; pass a user (the "
                        "default 65534:65534) or allow_root=True"
                    )
            state = info.get("State") or {}
            if not state.get("Running"):
                # Exited already: its ports are unpublished, its output says why.
                raise EnvironmentStartError(
                    f"docker: environment {spec.target!r} ({name}) exited before it was ready "
                    f"(exit code {state.get('ExitCode')})",
                    container_logs(name, 40),
                )
            if network == "none":
                base_url, unix_socket = "http://localhost", str(socket_dir) + "/server.sock"
            else:
                base_url, unix_socket = _published_url(info, self.container_port), None
        except BaseException:
            with contextlib.suppress(Exception):
                type(self)._remove(name)
            dk.remove_socket_dir(str(socket_parent) if socket_parent else None)
            raise
        return StartedEnv(
            id=name,
            provider=self.name,
            spec=spec,
            base_url=base_url,
            owner=owner,
            unix_socket=unix_socket,
            info={
                "container_id": container_id,
                "image": spec.target,
                "user": self.user or info.get("Config", {}).get("User", ""),
                "network": network,
                "limits": limits.model_dump(exclude_none=True),
                "isolation": "container: no capabilities, no-new-privileges, "
                + ("read-only root" if self.read_only else "writable root"),
            },
        )

    def _limits(self, limits: ResourceLimits) -> ResourceLimits:
        defaults = self.default_limits.model_dump()
        given = limits.model_dump(exclude_none=True)
        return ResourceLimits(**{**defaults, **given})

    async def _engine_alive(self, env: StartedEnv) -> bool:
        listed = await run_blocking(type(self)._named, env.id)
        return any(env.id in item.names and item.state == "running" for item in listed)

    async def log_tail(self, env: StartedEnv, lines: int = 40) -> str:
        return await run_blocking(container_logs, env.id, lines)


class LocalDockerProvider(DockerProvider):
    """OpenEnv's name for the Docker provider: `LocalDockerProvider()` then
    `start_container(image, port=None, env_vars=None)` / `wait_for_ready` / `stop_container`."""


def _published_url(info: dict[str, Any], container_port: int) -> str:
    bindings = (info.get("NetworkSettings") or {}).get("Ports") or {}
    for binding in bindings.get(f"{container_port}/tcp") or ():
        if binding.get("HostPort"):
            host = binding.get("HostIp") or "127.0.0.1"
            return f"http://{host}:{binding['HostPort']}"
    raise ProviderError(
        f"docker: the engine published no host port for container port {container_port}"
    )


def container_logs(name: str, lines: int) -> str:
    """The last `lines` of a container's output; "" once it is gone."""
    docker = dk.sdk()
    try:
        out = dk.engine().api.logs(name, stdout=True, stderr=True, tail=lines)
    except (docker.errors.DockerException, OSError):
        return ""
    return bytes(out).decode(errors="replace").rstrip()


def _deadline(labels: dict[str, str]) -> float:
    try:
        return float(labels[dk.DEADLINE_LABEL])
    except (KeyError, ValueError):
        return float("inf")
