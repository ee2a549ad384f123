"""Kubernetes provider: each environment a pod of an image, behind a service of its own.

One pod per environment (a server of many sessions when the trainer opens many sessions on it),
with `restartPolicy: Never`: an environment that dies surfaces as dead instead of coming back
empty mid-episode (as the swarm provider does). A bare pod, not a deployment: a fleet replaces a
dead server itself and reports the lost episode as an infrastructure failure.

Hardened as the Docker provider's containers: uid/gid 65534 and `runAsNonRoot`, every
capability dropped, no privilege escalation, a read-only root with an in-memory `emptyDir` at
/tmp (HOME=/tmp), seccomp `RuntimeDefault`, no service-account token and no service links.
Requests and limits come from `ResourceLimits` (cpus, memory_mb; requests equal limits, so the
pod is in the Guaranteed class when both are set). `pids` has no per-pod field in the pod API
(it is the kubelet's `podPidsLimit`) and `info["limits_not_enforced"]` says so. `wall_time_s`
becomes `activeDeadlineSeconds`, enforced by the kubelet, plus a deadline annotation for gc.
Network "none" adds a NetworkPolicy that denies all egress (enforced when the cluster's network
plugin enforces policies); the trainer still reaches the pod.

Readiness: the pod's readiness probe is `GET /health`, so its service routes to it only once it
serves; the provider waits on the same `/health` through the address it hands the trainer.

How the trainer reaches the service (`access`):
- "cluster-dns": `http://<service>.<namespace>.svc:<port>`, for a trainer inside the cluster
  (the default when the provider runs in a pod);
- "node-port": a NodePort service, reached at `node_address` (default: a node's ExternalIP,
  else its InternalIP) and the port the cluster assigned (the default from outside);
- "load-balancer": a LoadBalancer service, at the address the cloud assigns.
Port-forwarding is not offered: it streams every request through the API server.

Ownership and garbage collection: labels `openenv.org/managed`, `openenv.org/provider` select our
objects; the owner (org.openenv.owner.* as on Docker containers, whose values label syntax cannot
always hold) is in annotations. The service and network policy are owned by the pod (owner
references), so deleting the pod deletes them; when the trainer itself runs in a pod, the
environment's pod is owned by the trainer's pod and Kubernetes deletes it with the trainer.
`resources()` / `collect_orphans()` list the namespace for `openenv ps` / `openenv gc`.

Credentials: in-cluster (service account) when `KUBERNETES_SERVICE_HOST` is set, else the
kubeconfig (`KUBECONFIG` or ~/.kube/config, `context` to choose). The namespace is the
`namespace` argument, else `OPENENV_KUBERNETES_NAMESPACE`, else the context's (or the pod's), else
"default". The class-level listing (`openenv ps`/`gc`) uses the environment's credentials and
namespace. The official `kubernetes` client is imported on first use only.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import socket
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any, Optional

from openenv import settings

from . import _docker as dk
from .base import (
    Provider,
    ProviderError,
    ProviderUnavailableError,
    Resource,
    StartedEnv,
    run_blocking,
)
from .blocking import create_in_thread, wait_for_cleanups
from .docker import CONTAINER_PORT
from .ownership import LABEL_PREFIX, Owner
from .spec import EnvSpec, ResourceLimits, SpecError

logger = logging.getLogger("openenv.providers.kubernetes")

MANAGED = "openenv.org/managed"
PROVIDER = "openenv.org/provider"
#: The environment's name; the service and the network policy select its pod by it.
ENV_LABEL = "openenv.org/env"
TARGET_ANNOTATION = dk.TARGET_LABEL
DEADLINE_ANNOTATION = dk.DEADLINE_LABEL
ADDRESS_ANNOTATION = LABEL_PREFIX + "address"
#: uid/gid of "nobody", as the Docker provider's default user.
NON_ROOT_ID = 65534
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
ACCESS_MODES = ("auto", "cluster-dns", "node-port", "load-balancer")
#: Pod phases after which the pod never serves again.
_ENDED = {"Failed", "Succeeded"}
#: Waiting reasons that mean the container will not start without a change of spec.
_STUCK = {
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "CrashLoopBackOff",
}
#: Seconds a call to the API server may take.
API_TIMEOUT_S = 10.0


def sdk() -> Any:
    """The `kubernetes` package, or `ProviderUnavailableError` saying how to install it."""
    try:
        import kubernetes
        import kubernetes.client
        import kubernetes.config
    except ImportError:
        raise ProviderUnavailableError(
            "the kubernetes client is not installed: pip install 'openenv[kubernetes]'"
        ) from None
    return kubernetes


def in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


def _kubeconfig_paths() -> list[Path]:
    configured = os.environ.get("KUBECONFIG")
    if configured:
        return [Path(p).expanduser() for p in configured.split(os.pathsep) if p]
    return [Path("~/.kube/config").expanduser()]


class Cluster:
    """An API client and the namespace to work in, from one set of credentials."""

    def __init__(
        self,
        *,
        kubeconfig: Optional[str] = None,
        context: Optional[str] = None,
        namespace: Optional[str] = None,
    ) -> None:
        kubernetes = sdk()
        configuration = kubernetes.client.Configuration()
        context_namespace = None
        try:
            if kubeconfig is None and context is None and in_cluster():
                kubernetes.config.load_incluster_config(client_configuration=configuration)
                with contextlib.suppress(OSError):
                    context_namespace = (SERVICE_ACCOUNT_DIR / "namespace").read_text().strip()
                self.in_cluster = True
            else:
                # Read KUBECONFIG now: the client reads it once, when it is imported.
                kubeconfig = kubeconfig or os.pathsep.join(str(p) for p in _kubeconfig_paths())
                kubernetes.config.load_kube_config(
                    config_file=kubeconfig, context=context, client_configuration=configuration
                )
                _, active = kubernetes.config.list_kube_config_contexts(config_file=kubeconfig)
                chosen = active
                if context is not None:
                    contexts, _ = kubernetes.config.list_kube_config_contexts(
                        config_file=kubeconfig
                    )
                    chosen = next((c for c in contexts if c.get("name") == context), active)
                context_namespace = (chosen or {}).get("context", {}).get("namespace")
                self.in_cluster = False
        except (kubernetes.config.ConfigException, OSError, TypeError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise ProviderUnavailableError(
                f"no Kubernetes credentials ({first[:160]}): "
                "run inside a pod, or set KUBECONFIG / ~/.kube/config (`kubectl config view`)"
            ) from None
        self.namespace = (
            namespace or settings.KUBERNETES_NAMESPACE.get() or context_namespace or "default"
        )
        self.api_client = kubernetes.client.ApiClient(configuration)
        self.core = kubernetes.client.CoreV1Api(self.api_client)
        self.networking = kubernetes.client.NetworkingV1Api(self.api_client)
        self.host = configuration.host

    def call(self, what: str, fn: Any, *args: Any, missing_ok: bool = False, **kwargs: Any) -> Any:
        """One API request; a 404 is None with `missing_ok`, any other failure a ProviderError."""
        kubernetes = sdk()
        kwargs.setdefault("_request_timeout", API_TIMEOUT_S)
        try:
            return fn(*args, **kwargs)
        except kubernetes.client.ApiException as exc:
            if missing_ok and exc.status == 404:
                return None
            raise ProviderError(
                f"kubernetes: could not {what}: {exc.status} {exc.reason}: {_message(exc)}"
            ) from exc
        except (OSError, kubernetes.client.exceptions.OpenApiException) as exc:
            raise ProviderError(f"kubernetes: could not {what} at {self.host}: {exc}") from exc
        except Exception as exc:  # urllib3's connection errors
            if type(exc).__module__.startswith("urllib3"):
                raise ProviderError(f"kubernetes: could not {what} at {self.host}: {exc}") from exc
            raise


def _message(exc: Any) -> str:
    import json

    with contextlib.suppress(ValueError, TypeError):
        return str(json.loads(exc.body).get("message", ""))[:300]
    return str(exc.body or "")[:300]


_default_lock = threading.Lock()
_default: dict[int, Cluster] = {}
_reachable: set[int] = set()


def default_cluster() -> Cluster:
    """The environment's credentials and namespace, once per process."""
    pid = os.getpid()
    with _default_lock:
        cluster = _default.get(pid)
        if cluster is None:
            cluster = Cluster()
            _default.clear()
            _default[pid] = cluster
        return cluster


def _forget_default() -> None:
    """Tests (and a trainer that switches clusters) drop the cached client."""
    with _default_lock:
        _default.clear()
        _reachable.clear()


# -- manifests -------------------------------------------------------------------------------


def quantity_cpu(cpus: float) -> str:
    return f"{round(cpus * 1000)}m"


def quantity_memory(memory_mb: int) -> str:
    return f"{memory_mb}Mi"


def pod_manifest(
    name: str,
    spec: EnvSpec,
    owner: Owner,
    *,
    provider: str = "kubernetes",
    container_port: int = CONTAINER_PORT,
    command: Optional[list[str]] = None,
    image_pull_policy: Optional[str] = None,
    limits: Optional[ResourceLimits] = None,
    owner_reference: Optional[dict[str, Any]] = None,
) -> dict[str, Any]:
    """The hardened pod of one environment (see the module docstring)."""
    limits = limits or spec.limits
    amounts: dict[str, str] = {}
    if limits.cpus:
        amounts["cpu"] = quantity_cpu(limits.cpus)
    if limits.memory_mb:
        amounts["memory"] = quantity_memory(limits.memory_mb)
    annotations = {
        **owner.labels(),
        TARGET_ANNOTATION: spec.target,
        dk.CREATED_LABEL: f"{time.time():.3f}",
    }
    annotations.pop(dk.MANAGED_LABEL, None)
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": NON_ROOT_ID,
            "runAsGroup": NON_ROOT_ID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": "env",
                "image": spec.target,
                "ports": [{"name": "http", "containerPort": container_port, "protocol": "TCP"}],
                "env": [
                    {"name": key, "value": value}
                    for key, value in {"HOME": "/tmp", **spec.env_vars}.items()
                ],
                "readinessProbe": {
                    "httpGet": {"path": "/health", "port": "http"},
                    "periodSeconds": 1,
                    "timeoutSeconds": 2,
                    "failureThreshold": 3,
                },
                "resources": {"requests": dict(amounts), "limits": dict(amounts)},
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                    "privileged": False,
                    "readOnlyRootFilesystem": True,
                    "runAsNonRoot": True,
                    "runAsUser": NON_ROOT_ID,
                    "runAsGroup": NON_ROOT_ID,
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
            }
        ],
        "volumes": [{"name": "tmp", "emptyDir": {"medium": "Memory"}}],
    }
    container = pod_spec["containers"][0]
    if command:
        container["command"] = list(command)
    if image_pull_policy:
        container["imagePullPolicy"] = image_pull_policy
    if limits.wall_time_s:
        pod_spec["activeDeadlineSeconds"] = max(1, round(limits.wall_time_s))
        annotations[DEADLINE_ANNOTATION] = f"{time.time() + limits.wall_time_s:.3f}"
    metadata: dict[str, Any] = {
        "name": name,
        "labels": _labels(name, provider),
        "annotations": annotations,
    }
    if owner_reference:
        metadata["ownerReferences"] = [owner_reference]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}


def service_manifest(
    name: str,
    service_type: str,
    *,
    provider: str = "kubernetes",
    container_port: int = CONTAINER_PORT,
    pod_reference: Optional[dict[str, Any]] = None,
) -> dict[str, Any]:
    """The service in front of one environment's pod."""
    metadata: dict[str, Any] = {"name": name, "labels": _labels(name, provider)}
    if pod_reference:
        metadata["ownerReferences"] = [pod_reference]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {
            "type": service_type,
            "selector": {ENV_LABEL: name},
            "ports": [
                {"name": "http", "port": container_port, "targetPort": "http", "protocol": "TCP"}
            ],
        },
    }


def deny_egress_manifest(
    name: str, *, provider: str = "kubernetes", pod_reference: Optional[dict[str, Any]] = None
) -> dict[str, Any]:
    """Network "none": the pod opens no connection (the trainer's to it still arrive)."""
    metadata: dict[str, Any] = {"name": name, "labels": _labels(name, provider)}
    if pod_reference:
        metadata["ownerReferences"] = [pod_reference]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata,
        "spec": {"podSelector": {"matchLabels": {ENV_LABEL: name}}, "policyTypes": ["Egress"]},
    }


def _labels(name: str, provider: str) -> dict[str, str]:
    return {MANAGED: "1", PROVIDER: provider, ENV_LABEL: name}


def owner_reference(obj: Any, *, controller: bool = False) -> dict[str, Any]:
    """A reference to `obj` (a pod read through the client): its dependents die with it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": obj.metadata.name,
        "uid": obj.metadata.uid,
        "controller": controller,
        "blockOwnerDeletion": False,
    }


# -- the provider ------------------------------------------------------------------------------


class KubernetesProvider(Provider):
    """Starts each environment as a hardened pod of the spec's image, with a service.

    `access` says how the trainer reaches it ("auto", "cluster-dns", "node-port",
    "load-balancer"; see the module docstring); `node_address` overrides the node address of
    "node-port". `kubeconfig`, `context` and `namespace` choose the cluster; `command`,
    `container_port` and `image_pull_policy` shape the container; `default_limits` fills limits
    the spec leaves unset. `owned_by_trainer_pod` (default: when in the cluster) makes the
    environment's pod a dependent of the pod the trainer runs in (`HOSTNAME`).
    """

    name = "kubernetes"
    default_network = "egress"
    target_kind = "image"
    #: A start asks the API server about its pod at most once a second.
    liveness_interval_s = 1.0

    def __init__(
        self,
        *,
        namespace: Optional[str] = None,
        kubeconfig: Optional[str] = None,
        context: Optional[str] = None,
        access: str = "auto",
        node_address: Optional[str] = None,
        container_port: int = CONTAINER_PORT,
        command: Optional[list[str]] = None,
        image_pull_policy: Optional[str] = None,
        default_limits: ResourceLimits = ResourceLimits(),
        owned_by_trainer_pod: Optional[bool] = None,
    ) -> None:
        super().__init__()
        if access not in ACCESS_MODES:
            raise SpecError(f"access must be one of {', '.join(ACCESS_MODES)}, not {access!r}")
        self._options = {"namespace": namespace, "kubeconfig": kubeconfig, "context": context}
        self._cluster: Optional[Cluster] = None
        self.access = access
        self.node_address = node_address
        self.container_port = container_port
        self.command = command
        self.image_pull_policy = image_pull_policy
        self.default_limits = default_limits
        self.owned_by_trainer_pod = owned_by_trainer_pod
        #: Environments waited for -> when the API server last said they can still start.
        if any(self._options.values()):
            # Explicit credentials: check those, not the environment's.
            self.check_available = self._check_own_cluster  # type: ignore[method-assign]

    def _check_own_cluster(self) -> None:
        _ping(self.cluster)

    @property
    def cluster(self) -> Cluster:
        if self._cluster is None:
            if any(self._options.values()):
                self._cluster = Cluster(**self._options)
            else:
                self._cluster = default_cluster()
        return self._cluster

    # -- availability and listing -----------------------------------------------------------

    @classmethod
    def check_available(cls) -> None:
        """The client is installed, credentials exist and the API server answers (once per
        process; a later outage is a ProviderError from the call that meets it)."""
        if importlib.util.find_spec("kubernetes") is None:  # not imported yet: it is slow
            sdk()
        if os.getpid() in _reachable:
            return
        if not in_cluster() and not any(p.is_file() for p in _kubeconfig_paths()):
            raise ProviderUnavailableError(
                "no Kubernetes credentials: run inside a pod, or set KUBECONFIG / ~/.kube/config"
            )
        _ping(default_cluster())
        _reachable.add(os.getpid())

    @classmethod
    def resources(cls) -> list[Resource]:
        return [resource for resource, _ in cls._listed(default_cluster())]

    @classmethod
    def _listed(cls, cluster: Cluster) -> list[tuple[Resource, float]]:
        """Our pods (and services whose pod is gone), each with its wall-time deadline."""
        selector = f"{MANAGED}=1,{PROVIDER}={cls.name}"
        pods = cluster.call(
            "list pods",
            cluster.core.list_namespaced_pod,
            cluster.namespace,
            label_selector=selector,
        )
        services = cluster.call(
            "list services",
            cluster.core.list_namespaced_service,
            cluster.namespace,
            label_selector=selector,
        )
        out = []
        seen = set()
        for pod in pods.items:
            seen.add(pod.metadata.name)
            phase = (pod.status.phase if pod.status else None) or "Pending"
            resource = _as_resource(cls.name, pod.metadata, phase == "Running")
            out.append((resource, _deadline(pod.metadata.annotations or {})))
        for service in services.items:
            if service.metadata.name not in seen:  # its pod is gone: the service is left over
                resource = _as_resource(cls.name, service.metadata, False, no_owner=True)
                out.append((resource, float("inf")))
        return out

    @classmethod
    def remove_resource(cls, resource: Resource) -> None:
        _remove(default_cluster(), resource.id)

    @classmethod
    def _collectable(cls) -> list[Resource]:
        """Objects whose owner is gone, and pods past their wall time."""
        now = time.time()
        return [r for r, deadline in cls._listed(default_cluster()) if r.orphaned or deadline < now]

    # -- start and stop ---------------------------------------------------------------------

    async def _start(self, spec: EnvSpec) -> StartedEnv:
        name = dk.resource_name("k8s", spec.target, uuid.uuid4().hex[:10])
        owner = Owner.current()
        cluster = self.cluster
        return await create_in_thread(
            self, lambda: self._create(spec, name, owner), lambda env: _remove(cluster, env.id)
        )

    def _access(self) -> str:
        if self.access != "auto":
            return self.access
        return "cluster-dns" if self.cluster.in_cluster else "node-port"

    def _create(self, spec: EnvSpec, name: str, owner: Owner) -> StartedEnv:
        """Create the pod, its service (and policy); a failure leaves nothing behind."""
        cluster = self.cluster
        namespace = cluster.namespace
        network = spec.network or self.default_network
        access = self._access()
        limits = ResourceLimits(
            **{
                **self.default_limits.model_dump(),
                **spec.limits.model_dump(exclude_none=True),
            }
        )
        service_type = {
            "cluster-dns": "ClusterIP",
            "node-port": "NodePort",
            "load-balancer": "LoadBalancer",
        }[access]
        manifest = pod_manifest(
            name,
            spec,
            owner,
            provider=self.name,
            container_port=self.container_port,
            command=self.command,
            image_pull_policy=self.image_pull_policy,
            limits=limits,
            owner_reference=self._trainer_pod_reference(),
        )
        try:
            pod = cluster.call(
                f"create pod {name}", cluster.core.create_namespaced_pod, namespace, manifest
            )
            reference = owner_reference(pod, controller=True)
            service = cluster.call(
                f"create service {name}",
                cluster.core.create_namespaced_service,
                namespace,
                service_manifest(
                    name,
                    service_type,
                    provider=self.name,
                    container_port=self.container_port,
                    pod_reference=reference,
                ),
            )
            if network == "none":
                cluster.call(
                    f"create network policy {name}",
                    cluster.networking.create_namespaced_network_policy,
                    namespace,
                    deny_egress_manifest(name, provider=self.name, pod_reference=reference),
                )
            base_url = self._address(access, name, service)
        except BaseException:
            with contextlib.suppress(Exception):
                _remove(cluster, name)
            raise
        not_enforced = ["pids"] if limits.pids else []
        return StartedEnv(
            id=name,
            provider=self.name,
            spec=spec,
            base_url=base_url,
            owner=owner,
            info={
                "namespace": namespace,
                "pod": name,
                "service": name,
                "access": access,
                "image": spec.target,
                "network": network,
                "user": f"{NON_ROOT_ID}:{NON_ROOT_ID}",
                "limits": limits.model_dump(exclude_none=True),
                "limits_not_enforced": not_enforced,
                "isolation": "pod: non-root, no capabilities, no privilege escalation, "
                "read-only root, seccomp RuntimeDefault"
                + (", egress denied by NetworkPolicy" if network == "none" else ""),
            },
        )

    def _address(self, access: str, name: str, service: Any) -> str:
        namespace = self.cluster.namespace
        if access == "cluster-dns":
            return f"http://{name}.{namespace}.svc:{self.container_port}"
        if access == "node-port":
            node_port = next((p.node_port for p in service.spec.ports or () if p.node_port), None)
            if not node_port:
                raise ProviderError(f"kubernetes: service {name} was given no node port")
            return f"http://{self.node_address or self._node_address()}:{node_port}"
        return self._load_balancer_address(name)

    def _node_address(self) -> str:
        cluster = self.cluster
        nodes = cluster.call("list nodes", cluster.core.list_node)
        for kind in ("ExternalIP", "InternalIP"):
            for node in nodes.items:
                for address in (node.status.addresses if node.status else None) or ():
                    if address.type == kind and address.address:
                        return str(address.address)
        raise ProviderError(
            "kubernetes: no node has an address to reach a NodePort; pass node_address=..."
        )

    def _load_balancer_address(self, name: str, timeout_s: float = 300.0) -> str:
        cluster = self.cluster
        deadline = time.monotonic() + timeout_s
        while True:
            service = cluster.call(
                f"read service {name}",
                cluster.core.read_namespaced_service,
                name,
                cluster.namespace,
            )
            ingress = (
                service.status.load_balancer.ingress
                if service.status and service.status.load_balancer
                else None
            ) or ()
            for entry in ingress:
                host = entry.ip or entry.hostname
                if host:
                    return f"http://{host}:{self.container_port}"
            if time.monotonic() >= deadline:
                raise ProviderError(
                    f"kubernetes: service {name} got no load-balancer address in {timeout_s:g} s"
                )
            time.sleep(1.0)

    def _trainer_pod_reference(self) -> Optional[dict[str, Any]]:
        """The trainer's own pod, when it runs in one and asked (or by default in-cluster)."""
        wanted = self.owned_by_trainer_pod
        if wanted is None:
            wanted = self.cluster.in_cluster
        if not wanted:
            return None
        cluster = self.cluster
        pod_name = os.environ.get("HOSTNAME") or socket.gethostname()
        pod = cluster.call(
            f"read the trainer's pod {pod_name}",
            cluster.core.read_namespaced_pod,
            pod_name,
            cluster.namespace,
            missing_ok=True,
        )
        if pod is None:
            logger.info("kubernetes: the trainer runs in no pod of %s", cluster.namespace)
            return None
        return owner_reference(pod)

    async def _stop(self, env: StartedEnv) -> None:
        await run_blocking(_remove, self.cluster, env.id)

    async def close(self) -> None:
        """Stop everything this provider started, and finish removals of cancelled starts."""
        await super().close()
        await wait_for_cleanups(self)

    async def _alive(self, env: StartedEnv) -> bool:
        return await run_blocking(self._pod_can_serve, env.id)

    def _pod_can_serve(self, name: str) -> bool:
        """False once the pod is gone, ended, or stuck (its image cannot be pulled, ...)."""
        cluster = self.cluster
        pod = cluster.call(
            f"read pod {name}",
            cluster.core.read_namespaced_pod,
            name,
            cluster.namespace,
            missing_ok=True,
        )
        if pod is None or pod.metadata.deletion_timestamp is not None:
            return False
        status = pod.status
        if status is None:
            return True
        if status.phase in _ENDED:
            return False
        return not _stuck_reasons(status)

    async def log_tail(self, env: StartedEnv, lines: int = 40) -> str:
        return await run_blocking(self._log_tail, env.id, lines)

    def _log_tail(self, name: str, lines: int) -> str:
        """The container's last lines, preceded by why the pod is not running, if it says."""
        cluster = self.cluster
        out = []
        with contextlib.suppress(ProviderError):
            pod = cluster.call(
                f"read pod {name}",
                cluster.core.read_namespaced_pod,
                name,
                cluster.namespace,
                missing_ok=True,
            )
            if pod is not None and pod.status is not None:
                out.extend(_stuck_reasons(pod.status, everything=True))
                if pod.status.reason or pod.status.message:
                    out.append(f"pod {pod.status.phase}: {pod.status.reason} {pod.status.message}")
        with contextlib.suppress(ProviderError):
            text = cluster.call(
                f"read the log of pod {name}",
                cluster.core.read_namespaced_pod_log,
                name,
                cluster.namespace,
                tail_lines=lines,
                missing_ok=True,
            )
            if text:
                out.append(str(text).rstrip())
        return "\n".join(line for line in out if line.strip())


def _ping(cluster: Cluster) -> None:
    """`ProviderUnavailableError` in one line unless the API server answers."""
    kubernetes = sdk()
    try:
        kubernetes.client.VersionApi(cluster.api_client).get_code(_request_timeout=3.0)
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ProviderUnavailableError(
            f"the Kubernetes API server at {cluster.host} does not answer ({first[:120]})"
        ) from None


def _stuck_reasons(status: Any, everything: bool = False) -> list[str]:
    reasons = []
    for container in status.container_statuses or ():
        state = container.state
        waiting = state.waiting if state else None
        if waiting is not None and (everything or waiting.reason in _STUCK):
            reasons.append(
                f"container {container.name} waiting: {waiting.reason}: {waiting.message}"
            )
        terminated = state.terminated if state else None
        if terminated is not None and everything:
            reasons.append(
                f"container {container.name} terminated: {terminated.reason} "
                f"(exit code {terminated.exit_code})"
            )
    return reasons


def _remove(cluster: Cluster, name: str) -> None:
    """Delete an environment's pod, service and policy at once (grace 0); absent ones are fine.
    Removal is verified: the pod must be gone from the API server's listing."""
    core, networking, namespace = cluster.core, cluster.networking, cluster.namespace
    cluster.call(
        f"delete pod {name}",
        core.delete_namespaced_pod,
        name,
        namespace,
        grace_period_seconds=0,
        propagation_policy="Background",
        missing_ok=True,
    )
    cluster.call(
        f"delete service {name}", core.delete_namespaced_service, name, namespace, missing_ok=True
    )
    cluster.call(
        f"delete network policy {name}",
        networking.delete_namespaced_network_policy,
        name,
        namespace,
        missing_ok=True,
    )
    deadline = time.monotonic() + 30.0
    delay = 0.01
    while cluster.call(
        f"read pod {name}", core.read_namespaced_pod, name, namespace, missing_ok=True
    ):
        if time.monotonic() >= deadline:
            raise ProviderError(
                f"kubernetes: pod {name} still exists 30 s after its deletion; check it with "
                f"`kubectl -n {namespace} get pod {name}`"
            )
        time.sleep(delay)
        delay = min(delay * 2, 0.5)


def _as_resource(provider: str, metadata: Any, running: bool, no_owner: bool = False) -> Resource:
    annotations = dict(metadata.annotations or {})
    owner = None if no_owner else Owner.from_labels(annotations)
    created = metadata.creation_timestamp
    created_at = created.timestamp() if isinstance(created, datetime) else 0.0
    return Resource(
        id=metadata.name,
        provider=provider,
        target=annotations.get(TARGET_ANNOTATION, ""),
        owner=owner,
        owner_alive=owner.is_alive() if owner else None,
        running=running,
        created_at=created_at,
        address=f"{metadata.namespace}/{metadata.name}",
    )


def _deadline(annotations: dict[str, str]) -> float:
    try:
        return float(annotations[DEADLINE_ANNOTATION])
    except (KeyError, ValueError):
        return float("inf")
