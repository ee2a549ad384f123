"""Docker Swarm provider: each environment a swarm service of an image.

One replica by default (OpenEnv's provider starts 2): a replicated service behind one address
load-balances requests, and HTTP MCP sessions, held in one replica's memory, break when their
requests land on another. `scale(env, n)` adds replicas when that is wanted (WebSocket sessions
stay on the replica they connected to).

Ports are published in "host" mode by default, on a port the engine picks, read back from the
task's container: swarm's ingress routing mesh needs IPVS and iptables that not every machine
has (this one has not). Swarm cannot bind a published port to 127.0.0.1: the port is open on every
interface of the node, unlike the docker provider's. Network "none" is not offered (use the
docker provider).

Security: the same unprivileged user, no capabilities, read-only root with a tmpfs /tmp,
CPU/memory/PID limits, stop grace period 0 and owner labels as the docker provider.
no-new-privileges is set when the engine's API has it (1.46 and later, Docker 27); on older
engines it is not in force and `StartedEnv.info["no_new_privileges"]` says so. Services do not
restart a task that exits (restart condition "none"): an environment that dies surfaces as dead
instead of coming back empty. Removal is verified by listing the service and its containers.
Wall time works as in the docker provider (a timer in the owner, a deadline label for gc).
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from typing import Any, Optional

from . import _docker as dk
from .base import (
    EnvironmentStartError,
    ProviderError,
    ProviderUnavailableError,
    Resource,
    StartedEnv,
    run_blocking,
)
from .docker import CONTAINER_PORT, DEFAULT_LIMITS, DEFAULT_USER, EngineProvider, container_logs
from .ownership import Owner
from .spec import EnvSpec, ResourceLimits, SpecError

logger = logging.getLogger("openenv.providers.swarm")

#: Docker's label on a task's container naming its service.
SERVICE_NAME_LABEL = "com.docker.swarm.service.name"
_TASK_FAILED = {"failed", "rejected", "shutdown", "complete", "orphaned", "remove"}


class DockerSwarmProvider(EngineProvider):
    """Starts each environment as a one-replica swarm service of the spec's image.

    `auto_init_swarm=True` (OpenEnv's default) makes this engine a single-node swarm when it is
    in none, listening on 127.0.0.1 only (run `docker swarm init` yourself for a swarm other
    nodes can join); with False such an engine is unavailable, with a message saying to run it.
    `publish_mode` is "host" (default) or "ingress". The other options are those of
    `DockerProvider`.
    """

    name = "swarm"
    default_network = "egress"

    def __init__(
        self,
        *,
        auto_init_swarm: bool = True,
        publish_mode: str = "host",
        replicas: int = 1,
        user: Optional[str] = DEFAULT_USER,
        container_port: int = CONTAINER_PORT,
        read_only: bool = True,
        command: Optional[list[str]] = None,
        default_limits: ResourceLimits = DEFAULT_LIMITS,
    ) -> None:
        super().__init__()
        if publish_mode not in ("host", "ingress"):
            raise SpecError(f"publish_mode must be 'host' or 'ingress', not {publish_mode!r}")
        if replicas < 1:
            raise SpecError("replicas must be 1 or more")
        if user is not None and user.split(":", 1)[0] in ("0", "root"):
            raise SpecError(f"user {user!r} is root; the swarm provider runs no root services")
        self.auto_init_swarm = auto_init_swarm
        self.publish_mode = publish_mode
        self.replicas = replicas
        self.user = user
        self.container_port = container_port
        self.read_only = read_only
        self.command = command
        self.default_limits = default_limits

    # -- availability and listing -----------------------------------------------------------

    @staticmethod
    def swarm_active() -> bool:
        client = dk.engine()
        info = dk.engine_call("describe itself", client.info)
        return bool((info.get("Swarm") or {}).get("LocalNodeState") == "active")

    def ensure_swarm(self) -> None:
        """Make this engine a single-node swarm manager if it is in no swarm (when allowed)."""
        if self.swarm_active():
            return
        if not self.auto_init_swarm:
            raise ProviderUnavailableError(
                "this Docker engine is not in a swarm: run `docker swarm init` first"
            )
        client = dk.engine()
        try:
            # On loopback: a swarm made behind the user's back must not listen on the network.
            dk.engine_call(
                "initialise a swarm",
                lambda: client.swarm.init(advertise_addr="127.0.0.1", listen_addr="127.0.0.1:2377"),
            )
        except ProviderError as exc:
            raise ProviderUnavailableError(
                f"could not make this engine a swarm ({exc}); run `docker swarm init "
                "--advertise-addr ADDRESS` by hand"
            ) from None
        logger.info("swarm: initialised a single-node swarm on this engine")

    @classmethod
    def _services(cls, **filters: Any) -> list[dk.Listed]:
        if not cls.swarm_active():
            return []
        client = dk.engine()
        payload = dk.engine_call("list services", lambda: client.api.services(filters=filters))
        return dk.parse_services(payload)

    @classmethod
    def _named(cls, name: str) -> list[dk.Listed]:
        # The service `name` filter matches prefixes; `has_name` checks the exact name.
        return cls._services(name=name)

    @classmethod
    def _task_containers(cls, name: str) -> list[dk.Listed]:
        client = dk.engine()
        payload = dk.engine_call(
            "list containers",
            lambda: client.api.containers(
                all=True, filters={"label": f"{SERVICE_NAME_LABEL}={name}"}
            ),
        )
        return dk.parse_containers(payload)

    @classmethod
    def resources(cls) -> list[Resource]:
        return [
            cls._as_resource(
                item, any(c.state == "running" for c in cls._task_containers(item.name))
            )
            for item in cls._managed()
        ]

    @classmethod
    def _managed(cls) -> list[dk.Listed]:
        return cls._services(**dk.managed_filter(cls.name))

    @classmethod
    def _remove(cls, name: str) -> None:
        """Remove service `name`, then wait until neither it nor a container of it is listed."""
        docker = dk.sdk()
        if dk.has_name(cls._named(name), name):
            client = dk.engine()
            with contextlib.suppress(docker.errors.APIError):  # the listing decides
                client.api.remove_service(name)
            dk.wait_gone(lambda: cls._named(name), name)
        dk.wait_gone(
            lambda: [dk.Listed(id="", names=(name,))] if cls._task_containers(name) else [],
            name,
        )

    # -- start, scale and stop --------------------------------------------------------------

    async def _start(self, spec: EnvSpec) -> StartedEnv:
        if (spec.network or self.default_network) == "none":
            raise SpecError(
                "swarm: network 'none' is not supported by swarm services; use the docker "
                "provider for an environment without network"
            )
        await run_blocking(self.ensure_swarm)
        name = dk.resource_name("swarm", spec.target, uuid.uuid4().hex[:10])
        return await self._create_in_thread(spec, name)

    def _create(self, spec: EnvSpec, name: str, owner: Owner) -> StartedEnv:
        docker = dk.sdk()
        types = docker.types
        client = dk.engine()
        limits = _merge(self.default_limits, spec.limits)
        labels = {
            **owner.labels(),
            dk.PROVIDER_LABEL: self.name,
            dk.TARGET_LABEL: spec.target,
            dk.CREATED_LABEL: f"{time.time():.3f}",
        }
        if limits.wall_time_s:
            labels[dk.DEADLINE_LABEL] = f"{time.time() + limits.wall_time_s:.3f}"
        resources = types.Resources(
            cpu_limit=int(limits.cpus * 1e9) if limits.cpus else None,
            mem_limit=limits.memory_mb * 1024 * 1024 if limits.memory_mb else None,
        )
        if limits.pids:
            resources.setdefault("Limits", {})["Pids"] = limits.pids
        nnp = _api_at_least(client.api.api_version, "1.46")
        container_spec = types.ContainerSpec(
            spec.target,
            command=self.command,
            env=[f"{k}={v}" for k, v in {"HOME": "/tmp", **spec.env_vars}.items()],
            labels=labels,
            user=self.user,
            read_only=self.read_only,
            cap_drop=["ALL"],
            stop_grace_period=0,
            mounts=[types.Mount("/tmp", "", type="tmpfs")],
        )
        if nnp:
            container_spec["Privileges"] = {"NoNewPrivileges": True}
        task_template = types.TaskTemplate(
            container_spec,
            resources=resources,
            restart_policy=types.RestartPolicy(condition="none"),
        )
        port: dict[str, Any] = {
            "Protocol": "tcp",
            "TargetPort": self.container_port,
            "PublishMode": self.publish_mode,
        }
        if spec.port:
            port["PublishedPort"] = spec.port
        try:
            dk.engine_call(
                f"create service {name}",
                lambda: client.api.create_service(
                    task_template,
                    name=name,
                    labels=labels,
                    mode=types.ServiceMode("replicated", replicas=self.replicas),
                    endpoint_spec={"Mode": "vip", "Ports": [port]},
                ),
            )
            container_id, base_url = self._wait_published(name, spec)
        except BaseException:
            with contextlib.suppress(Exception):
                type(self)._remove(name)
            raise
        return StartedEnv(
            id=name,
            provider=self.name,
            spec=spec,
            base_url=base_url,
            owner=owner,
            info={
                "service": name,
                "container_id": container_id,
                "image": spec.target,
                "user": self.user or "",
                "replicas": self.replicas,
                "publish_mode": self.publish_mode,
                "limits": limits.model_dump(exclude_none=True),
                "no_new_privileges": nnp,
            },
        )

    def _wait_published(self, name: str, spec: EnvSpec) -> tuple[str, str]:
        """Wait for the service's task container and its address; fail if the task fails."""
        client = dk.engine()
        deadline = time.monotonic() + spec.ready_timeout_s
        delay = 0.02
        while True:
            tasks = dk.engine_call(
                "list tasks", lambda: client.api.tasks(filters={"service": name})
            )
            for task in tasks:
                status = task.get("Status") or {}
                container_id = (status.get("ContainerStatus") or {}).get("ContainerID")
                if status.get("State") in _TASK_FAILED:
                    raise EnvironmentStartError(
                        f"swarm: the task of {spec.target!r} ({name}) is "
                        f"{status.get('State')}: {status.get('Err') or status.get('Message')}",
                        container_logs(container_id, 40) if container_id else "",
                    )
                if not container_id:
                    continue
                url = self._url(client, name, container_id)
                if url:
                    return container_id, url
            if time.monotonic() >= deadline:
                raise EnvironmentStartError(
                    f"swarm: no task of {spec.target!r} ({name}) started within "
                    f"{spec.ready_timeout_s:g} s"
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.25)

    def _url(self, client: Any, name: str, container_id: str) -> Optional[str]:
        if self.publish_mode == "ingress":
            service = dk.engine_call("inspect a service", lambda: client.api.inspect_service(name))
            for item in dk.parse_services([service]):
                for address in item.published:
                    return f"http://127.0.0.1:{address.rsplit(':', 1)[1]}"
            return None
        docker = dk.sdk()
        try:
            info = client.api.inspect_container(container_id)
        except docker.errors.NotFound:
            return None  # the node's agent has not created it yet
        key = f"{self.container_port}/tcp"
        for binding in ((info.get("NetworkSettings") or {}).get("Ports") or {}).get(key) or ():
            if binding.get("HostPort"):
                return f"http://127.0.0.1:{binding['HostPort']}"
        return None

    def scale(self, env: StartedEnv, replicas: int) -> None:
        """Run `replicas` copies of the environment's service (blocking)."""
        if replicas < 1:
            raise SpecError("replicas must be 1 or more; stop the environment to remove it")
        client = dk.engine()
        service = client.services.get(env.id)
        dk.engine_call(f"scale service {env.id}", lambda: service.scale(replicas))
        env.info["replicas"] = replicas

    def running_replicas(self, env: StartedEnv) -> int:
        """How many containers of the environment's service run now."""
        return sum(1 for c in self._task_containers(env.id) if c.state == "running")

    async def _engine_alive(self, env: StartedEnv) -> bool:
        containers = await run_blocking(type(self)._task_containers, env.id)
        return any(c.state == "running" for c in containers)

    async def log_tail(self, env: StartedEnv, lines: int = 40) -> str:
        container_id = env.info.get("container_id")
        if not container_id:
            return ""
        return await run_blocking(container_logs, container_id, lines)


def _merge(defaults: ResourceLimits, given: ResourceLimits) -> ResourceLimits:
    return ResourceLimits(**{**defaults.model_dump(), **given.model_dump(exclude_none=True)})


def _api_at_least(version: str, minimum: str) -> bool:
    def parts(text: str) -> tuple[int, ...]:
        return tuple(int(p) for p in text.split(".") if p.isdigit())

    return parts(version) >= parts(minimum)
