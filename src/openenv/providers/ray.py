"""Ray provider: each environment server a Ray actor, reached over the ordinary protocol.

The actor imports the environment's app and serves it with uvicorn in its own worker process on
the node Ray placed it on; the trainer talks to it over HTTP/WebSocket with the usual client, so
nothing of the protocol changes. The server binds loopback when the actor runs on the trainer's
machine and the node's IP otherwise (Ray's cluster network must then be trusted: the server,
like Ray itself, has no authentication).

Scheduling is Ray's: `ResourceLimits.cpus` and `memory_mb` become the actor's `num_cpus` and
`memory` (logical reservations Ray schedules by, not ceilings the kernel enforces), custom
`resources` and a `scheduling_strategy` come from the provider's options ("SPREAD" unless
told otherwise: an `EnvFleet` of N servers on this provider spreads them across the nodes,
and a server Ray restarts or the fleet replaces is spread the same way), and `start_many`
places N servers through a placement group (e.g. "STRICT_SPREAD": one per node).

Restarts are Ray's too (`max_restarts`): a restarted actor serves on a new address and has lost
every session it held. `is_running(env)` answers False once for each restart (the episodes on
the old server failed for infrastructure reasons; a client that owns the environment raises
`EnvironmentDiedError`, category "infrastructure") and moves `env.base_url` to the new server.

Actors are named in a namespace ("openenv" by default) and carry their owner, so `openenv ps`
and `openenv gc` list and collect them when `RAY_ADDRESS` names the cluster. Actors are not
detached: Ray itself removes them when the trainer's driver exits, however it exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import importlib.util
import logging
import os
import sys
import threading
import time
from collections import deque
from dataclasses import asdict
from typing import Any, ClassVar, Optional

from .base import (
    EnvironmentDiedError,
    EnvironmentStartError,
    Provider,
    ProviderError,
    ProviderUnavailableError,
    Resource,
    StartedEnv,
    run_blocking,
)
from .local import new_id
from .ownership import Owner
from .spec import EnvSpec, SpecError, resolve_app

logger = logging.getLogger("openenv.providers.ray")

DEFAULT_NAMESPACE = "openenv"
#: Seconds an actor call may take before the actor counts as unreachable.
CALL_TIMEOUT_S = 10.0

#: (placement group, bundle index) for the starts `start_many` makes.
_placement: contextvars.ContextVar[Optional[tuple[Any, int]]] = contextvars.ContextVar(
    "openenv_ray_placement", default=None
)


class EnvServerActor:
    """Runs inside the Ray worker: serves one environment app until the actor is killed.

    Made a Ray actor class by `_actor_class()`; a restart by Ray runs `__init__` again, which
    serves anew (a new incarnation, on a new port unless the spec fixed one)."""

    def __init__(self, config: dict[str, Any]) -> None:
        import secrets

        import ray

        self.config = config
        self.incarnation = secrets.token_hex(8)
        self.started_at = time.time()
        self.log: deque[str] = deque(maxlen=200)
        self._capture_logs()
        os.environ.update(config["env_vars"])
        if config.get("root"):
            sys.path.insert(0, config["root"])
            with contextlib.suppress(OSError):
                os.chdir(config["root"])
        from openenv.providers.zygote import bind_server_socket, load_app, serve_app

        self.node_ip = ray.util.get_node_ip_address()
        self.node_id = ray.get_runtime_context().get_node_id()
        host = config.get("host") or (
            "127.0.0.1" if self.node_ip == config["driver_ip"] else self.node_ip
        )
        sock = bind_server_socket({"host": host, "port": config.get("port") or 0})
        self.url = f"http://{host}:{sock.getsockname()[1]}"
        app = load_app(config["app"], reimport=False)
        self.thread = threading.Thread(target=serve_app, args=(app, sock), daemon=True)
        self.thread.start()

    def _capture_logs(self) -> None:
        """Keep the server's last log lines for `log_tail` (Ray keeps the rest in its logs).
        Idempotent: uvicorn replaces its loggers' handlers when it configures logging, so this
        runs again on every `describe` (the first comes right after the server starts)."""
        handler = getattr(self, "_log_handler", None)
        if handler is None:
            log = self.log

            class Keep(logging.Handler):
                def emit(self, record: logging.LogRecord) -> None:
                    log.append(self.format(record))

            handler = self._log_handler = Keep()
            handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        for name in ("uvicorn", "openenv"):  # uvicorn.error propagates to uvicorn
            logger = logging.getLogger(name)
            if handler not in logger.handlers:
                logger.addHandler(handler)

    def describe(self) -> dict[str, Any]:
        self._capture_logs()
        return {
            "id": self.config["id"],
            "target": self.config["target"],
            "owner": self.config["owner"],
            "created_at": self.config["created_at"],
            "url": self.url if self.thread.is_alive() else "",
            "incarnation": self.incarnation,
            "pid": os.getpid(),
            "node_id": self.node_id,
            "node_ip": self.node_ip,
            "serving": self.thread.is_alive(),
        }

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(list(self.log)[-lines:])


_actor_cls: Any = None
_connect_lock = threading.Lock()


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ProviderUnavailableError(
            "the Ray provider needs ray: pip install 'openenv[ray]'"
        ) from None
    return ray


def _actor_class() -> Any:
    global _actor_cls
    with _connect_lock:
        if _actor_cls is None:
            _actor_cls = _ray().remote(EnvServerActor)
        return _actor_cls


async def _call(ref: Any, timeout_s: float = CALL_TIMEOUT_S) -> Any:
    """Await an actor call without blocking the loop (Ray's futures resolve on its threads)."""
    return await asyncio.wait_for(asyncio.wrap_future(ref.future()), timeout_s)


def _actor_gone_errors() -> tuple[type[BaseException], ...]:
    """Dead for good, restarting or not answering: either way, not serving now."""
    exceptions = _ray().exceptions
    return (exceptions.RayActorError, exceptions.ActorUnavailableError, asyncio.TimeoutError)


def _actor_dead_error() -> type[BaseException]:
    """Dead for good (Ray will not restart it); `ActorUnavailableError` is a restart."""
    dead: type[BaseException] = _ray().exceptions.ActorDiedError
    return dead


class RayProvider(Provider):
    """Starts each environment server as a Ray actor on a Ray cluster.

    `address`: the cluster to use (`"ray://..."`, `"host:port"`, `"auto"`); None reads
    `RAY_ADDRESS`, and with neither a local cluster is started (or one already started with
    `ray start` on this machine is used). A trainer that already called `ray.init` keeps its
    own connection. `num_cpus` / `memory_mb` are reserved per actor when the spec's limits say
    nothing; `resources` adds custom resources (e.g. `{"gpu_node": 1}`); `scheduling_strategy`
    is passed to Ray: "SPREAD" by default, so that a fleet's servers land on different nodes
    (Ray's "DEFAULT" fills the trainer's node first), or "DEFAULT", a
    `NodeAffinitySchedulingStrategy`, ...; `max_restarts` is how
    often Ray restarts a dead server; `host` forces the address servers bind; `runtime_env` is
    Ray's (e.g. to install the environment on nodes that lack it).
    """

    name: ClassVar[str] = "ray"
    default_network: ClassVar[str] = "egress"

    def __init__(
        self,
        *,
        address: Optional[str] = None,
        namespace: str = DEFAULT_NAMESPACE,
        num_cpus: float = 0.25,
        memory_mb: Optional[int] = None,
        resources: Optional[dict[str, float]] = None,
        scheduling_strategy: Any = "SPREAD",
        max_restarts: int = 3,
        host: Optional[str] = None,
        runtime_env: Optional[dict[str, Any]] = None,
    ) -> None:
        super().__init__()
        if max_restarts < -1:
            raise SpecError("max_restarts must be -1 (forever), 0 or more")
        self.address = address
        self.namespace = namespace
        self.num_cpus = num_cpus
        self.memory_mb = memory_mb
        self.actor_resources = dict(resources or {})
        self.scheduling_strategy = scheduling_strategy
        self.max_restarts = max_restarts
        self.host = host
        self.runtime_env = runtime_env
        self._actors: dict[str, Any] = {}
        #: placement group id -> (group, env ids placed in it); removed with its last env.
        self._groups: dict[str, tuple[Any, set[str]]] = {}

    # -- availability and the cluster -------------------------------------------------------

    @classmethod
    def check_available(cls) -> None:
        if importlib.util.find_spec("ray") is None:
            raise ProviderUnavailableError("the Ray provider needs ray: pip install 'openenv[ray]'")

    def connect(self) -> Any:
        """Join the cluster (blocking); the `ray` module, initialised."""
        ray = _ray()
        with _connect_lock:  # concurrent starts (a fleet's) must not race into ray.init
            if not ray.is_initialized():
                ray.init(
                    address=self.address or os.environ.get("RAY_ADDRESS") or None,
                    namespace=self.namespace,
                    include_dashboard=False,
                    log_to_driver=False,
                    configure_logging=False,
                    ignore_reinit_error=True,
                )
        return ray

    # -- start, stop, watch -----------------------------------------------------------------

    def _check_spec(self, spec: EnvSpec) -> None:
        if spec.network == "none":
            raise SpecError(
                "ray: an environment without network cannot be reached by its trainer on "
                "another node; use provider='sandbox' or 'docker' for network='none'"
            )
        if spec.limits.pids is not None or spec.limits.wall_time_s is not None:
            raise SpecError(
                "ray: limits.pids and limits.wall_time_s are not enforced by Ray; leave them "
                "out, or use provider='sandbox' or 'docker'"
            )

    def _options(self, spec: EnvSpec, env_id: str) -> dict[str, Any]:
        memory_mb = spec.limits.memory_mb or self.memory_mb
        options: dict[str, Any] = {
            "name": env_id,
            "namespace": self.namespace,
            "num_cpus": spec.limits.cpus if spec.limits.cpus is not None else self.num_cpus,
            "max_restarts": self.max_restarts,
            # A call that was running when the actor died is not replayed on the new one.
            "max_task_retries": 0,
            # The server thread answers HTTP while Ray calls (describe) run beside it.
            "max_concurrency": 4,
        }
        if memory_mb:
            options["memory"] = memory_mb * 1024 * 1024
        if self.actor_resources:
            options["resources"] = self.actor_resources
        if self.runtime_env:
            options["runtime_env"] = self.runtime_env
        placement = _placement.get()
        if placement is not None:
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            group, index = placement
            options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                placement_group=group, placement_group_bundle_index=index
            )
        elif self.scheduling_strategy is not None:
            options["scheduling_strategy"] = self.scheduling_strategy
        return options

    async def _start(self, spec: EnvSpec) -> StartedEnv:
        self._check_spec(spec)
        target = resolve_app(spec.target)
        ray = await run_blocking(self.connect)
        env_id = new_id(self.name, target.name)
        owner = Owner.current()
        config = {
            "id": env_id,
            "target": spec.target,
            "app": target.app,
            "root": str(target.root) if target.root else None,
            "env_vars": dict(spec.env_vars),
            "host": self.host,
            "port": spec.port,
            "driver_ip": ray.util.get_node_ip_address(),
            "owner": asdict(owner),
            "created_at": time.time(),
        }
        actor = _actor_class().options(**self._options(spec, env_id)).remote(config)
        self._actors[env_id] = actor
        try:
            # The first call returns once __init__ has bound the port and imported the app.
            facts = await _call(actor.describe.remote(), spec.ready_timeout_s)
        except BaseException as exc:
            await run_blocking(self._kill, actor)
            self._actors.pop(env_id, None)
            if isinstance(exc, asyncio.TimeoutError):
                raise EnvironmentStartError(
                    f"ray: actor for {spec.target!r} ({env_id}) not placed and serving within "
                    f"{spec.ready_timeout_s:g} s: does the cluster have the resources it asks "
                    f"for ({self._options(spec, env_id).get('num_cpus')} CPU, "
                    f"{self.actor_resources or 'no custom resources'})?"
                ) from None
            if isinstance(exc, _actor_gone_errors()):
                raise EnvironmentStartError(
                    f"ray: the actor for {spec.target!r} ({env_id}) failed to start", str(exc)
                ) from None
            raise
        placement = _placement.get()
        if placement is not None:
            group_id = placement[0].id.hex()
            self._groups[group_id][1].add(env_id)
        return StartedEnv(
            id=env_id,
            provider=self.name,
            spec=spec,
            base_url=facts["url"],
            owner=owner,
            info={
                "actor": env_id,
                "namespace": self.namespace,
                "node_id": facts["node_id"],
                "node_ip": facts["node_ip"],
                "pid": facts["pid"],
                "incarnation": facts["incarnation"],
                "restarts": 0,
                "placement_group": placement[0].id.hex() if placement else None,
            },
        )

    async def start_many(
        self, spec: EnvSpec | str, count: int, *, strategy: str = "SPREAD", **fields: Any
    ) -> list[StartedEnv]:
        """Start `count` servers in one placement group: "SPREAD"/"STRICT_SPREAD" across
        nodes, "PACK"/"STRICT_PACK" together. All start or none (what started is stopped)."""
        if count < 1:
            raise SpecError("count must be 1 or more")
        spec = EnvSpec.of(spec, **fields)
        self.check_available()
        self._check_spec(spec)
        ray = await run_blocking(self.connect)
        bundle: dict[str, float] = {
            "CPU": spec.limits.cpus or self.num_cpus,
            **self.actor_resources,
        }
        memory_mb = spec.limits.memory_mb or self.memory_mb
        if memory_mb:
            bundle["memory"] = memory_mb * 1024 * 1024
        group = ray.util.placement_group([dict(bundle) for _ in range(count)], strategy=strategy)
        self._groups[group.id.hex()] = (group, set())
        try:
            await _call(group.ready(), spec.ready_timeout_s)
        except BaseException as exc:
            self._remove_group(group.id.hex())
            if isinstance(exc, asyncio.TimeoutError):
                raise EnvironmentStartError(
                    f"ray: no placement for {count} x {bundle} with {strategy} within "
                    f"{spec.ready_timeout_s:g} s (see `ray status`)"
                ) from None
            raise

        async def one(index: int) -> StartedEnv:
            _placement.set((group, index))
            return await self.start(spec)

        results = await asyncio.gather(*(one(i) for i in range(count)), return_exceptions=True)
        started = [r for r in results if isinstance(r, StartedEnv)]
        failure = next((r for r in results if isinstance(r, BaseException)), None)
        if failure is not None:
            for env in started:
                with contextlib.suppress(Exception):
                    await self.stop(env)
            self._remove_group(group.id.hex())
            raise failure
        return started

    def _kill(self, actor: Any, timeout_s: float = 30.0) -> None:
        """Kill an actor for good and wait until Ray reports it dead (blocking)."""
        ray = _ray()
        with contextlib.suppress(Exception):
            ray.kill(actor, no_restart=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                ray.get(actor.describe.remote(), timeout=2.0)
            except _actor_dead_error():
                return
            except (ray.exceptions.GetTimeoutError, ray.exceptions.ActorUnavailableError):
                pass
            time.sleep(0.05)
        raise ProviderError("ray: an actor did not die within 30 s of ray.kill")

    def _remove_group(self, group_id: str) -> None:
        entry = self._groups.pop(group_id, None)
        if entry is not None:
            with contextlib.suppress(Exception):
                _ray().util.remove_placement_group(entry[0])

    async def _stop(self, env: StartedEnv) -> None:
        actor = self._actors.pop(env.id, None)
        if actor is None:
            actor = await run_blocking(_named_actor, env.id, env.info.get("namespace"))
        if actor is not None:
            await run_blocking(self._kill, actor)
        group_id = env.info.get("placement_group")
        if group_id and group_id in self._groups:
            members = self._groups[group_id][1]
            members.discard(env.id)
            if not members:
                await run_blocking(self._remove_group, group_id)

    async def close(self) -> None:
        await super().close()
        for group_id in list(self._groups):
            await run_blocking(self._remove_group, group_id)

    async def _alive(self, env: StartedEnv) -> bool:
        """False when the actor is dead or restarting, and once after each restart (whose
        new address `env.base_url` then holds)."""
        actor = self._actors.get(env.id)
        if actor is None:
            return False
        try:
            facts = await _call(actor.describe.remote(), 5.0)
        except _actor_gone_errors():
            return False
        if facts["incarnation"] == env.info.get("incarnation"):
            return bool(facts["serving"])
        logger.warning(
            "ray: %s was restarted by Ray (now on %s); its sessions were lost", env.id, facts["url"]
        )
        env.base_url = facts["url"]
        env.info.update(
            incarnation=facts["incarnation"],
            pid=facts["pid"],
            node_id=facts["node_id"],
            node_ip=facts["node_ip"],
            restarts=int(env.info.get("restarts", 0)) + 1,
        )
        return False

    async def wait_restarted(self, env: StartedEnv, timeout_s: float = 60.0) -> StartedEnv:
        """Wait until the environment's actor serves again (after a restart by Ray, on the
        address `env.base_url` then holds); `EnvironmentDiedError` when Ray will not restart
        it. Returns at once when it never died."""
        deadline = time.monotonic() + timeout_s
        while True:
            actor = self._actors.get(env.id)
            if actor is None:
                raise EnvironmentDiedError(f"ray: {env.id} was stopped")
            try:
                await _call(actor.describe.remote(), max(0.1, deadline - time.monotonic()))
                await self._alive(env)  # moves env.base_url when this is a new incarnation
                break
            except _actor_dead_error() as exc:
                # A call in flight when the actor died fails so too, restart or not: the
                # cluster's actor table says whether Ray gave up on it.
                if await run_blocking(_actor_state, actor) != "DEAD":
                    await asyncio.sleep(0.1)
                    continue
                raise EnvironmentDiedError(
                    f"ray: {env.id} died and Ray will not restart it (max_restarts="
                    f"{self.max_restarts} used up, or no node can take it): {exc}"
                ) from None
            except _actor_gone_errors():
                pass
            if time.monotonic() >= deadline:
                raise EnvironmentDiedError(f"ray: {env.id} not restarted within {timeout_s:g} s")
            await asyncio.sleep(0.1)
        await self.wait_ready(env, max(1.0, deadline - time.monotonic()))
        return env

    async def log_tail(self, env: StartedEnv, lines: int = 40) -> str:
        actor = self._actors.get(env.id)
        if actor is None:
            return ""
        try:
            return str(await _call(actor.log_tail.remote(lines), 5.0))
        except Exception:
            return ""

    # -- every environment actor on the cluster, for `openenv ps` / `openenv gc` --------------

    @classmethod
    def _cluster_known(cls) -> bool:
        """Only a cluster the user named (or this process joined) is listed: `openenv ps`
        must not start a Ray cluster to find nothing in it."""
        ray = sys.modules.get("ray")  # imported only for a cluster named (ray is slow to import)
        if ray is not None and ray.is_initialized():
            return True
        return bool(os.environ.get("RAY_ADDRESS")) and importlib.util.find_spec("ray") is not None

    @classmethod
    def resources(cls) -> list[Resource]:
        if not cls._cluster_known():
            return []
        ray = RayProvider().connect()
        actors = []
        for entry in ray.util.list_named_actors(all_namespaces=True):
            name, namespace = entry["name"], entry["namespace"]
            actor = _named_actor(name, namespace) if name.startswith(cls.name + "-") else None
            if actor is not None:
                # Asked all at once: a cluster of thousands is listed in one round trip's time.
                actors.append((name, namespace, actor.describe.remote()))
        deadline = time.monotonic() + CALL_TIMEOUT_S
        found = []
        for name, namespace, ref in actors:
            try:
                facts = ray.get(ref, timeout=max(0.1, deadline - time.monotonic()))
                owner = Owner(**facts["owner"])
                owner_alive = owner.is_alive()
            except Exception:
                # Restarting or not answering: listed, but never an orphan (it may be a live
                # trainer's), so `openenv gc` leaves it for a later run.
                facts = {}
                owner, owner_alive = Owner("(not answering)", "", 0, 0), None
            found.append(
                Resource(
                    id=name,
                    provider=cls.name,
                    target=facts.get("target", ""),
                    owner=owner,
                    owner_alive=owner_alive,
                    running=bool(facts.get("url")),
                    created_at=float(facts.get("created_at") or 0.0),
                    address=f"{namespace}/{name} {facts.get('url', '')}".strip(),
                )
            )
        return found

    @classmethod
    def remove_resource(cls, resource: Resource) -> None:
        namespace = resource.address.split("/", 1)[0] if "/" in resource.address else None
        actor = _named_actor(resource.id, namespace or DEFAULT_NAMESPACE)
        if actor is not None:
            RayProvider()._kill(actor)


def _actor_state(actor: Any) -> Optional[str]:
    """ALIVE, RESTARTING, DEAD, ... from the cluster's actor table; None if it cannot say."""
    try:
        from ray._private import state

        info = state.actors(actor_id=actor._actor_id.hex())
    except Exception:
        return None
    value = info.get("State") if isinstance(info, dict) else None
    return str(value) if value else None


def _named_actor(name: str, namespace: Optional[str]) -> Any:
    """The live actor `name` in `namespace`, None when there is none."""
    ray = _ray()
    try:
        return ray.get_actor(name, namespace=namespace or DEFAULT_NAMESPACE)
    except ValueError:
        return None
