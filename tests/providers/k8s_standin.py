"""A stateful stand-in for the Kubernetes API server, for the Kubernetes provider's tests.

No cluster can run on the test machines, so this is a TEST DOUBLE of the API server, not
Kubernetes: a real HTTP server (Starlette under uvicorn, on loopback) that the real `kubernetes`
client talks to. It keeps pods, services, network policies and nodes in memory and answers
create / read / list (equality label selectors) / delete with the API's JSON shapes and status
codes (201, 200, 401, 404 NotFound, 409 AlreadyExists, 422 Invalid as `Status` objects). Every
object created is checked against the Kubernetes JSON schema (`kubernetes-validate`, strict), as
a real API server rejects unknown or mistyped fields. Requests without the kubeconfig's bearer
token get 401.

Its "kubelet": a pod of a known image runs that image's ASGI app in this process, on a loopback
port in the NodePort range; the pod turns Ready once its readiness probe (`httpGet` on the
probe's path) answers 200. A NodePort service gets that port as its node port, and the one node
has InternalIP 127.0.0.1, so the trainer reaches the pod as it would through a node. An unknown
image waits in `ErrImagePull`; `activeDeadlineSeconds` ends the pod (`DeadlineExceeded`);
`kill_pod` ends it as a crash would (exit 137). Deleting an object deletes its dependents (owner
references), as the garbage collector does. No scheduling, no watches, no DNS.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import random
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from tests.providers.standin_support import bind_node_port as _bind_node_port
from tests.providers.standin_support import serve_standin, start_server, stop_server
from tests.support.server import load_app

KUBERNETES_VERSION = "1.37.0"
#: plural -> (apiVersion, kind) of what the stand-in stores.
KINDS = {
    "pods": ("v1", "Pod"),
    "services": ("v1", "Service"),
    "networkpolicies": ("networking.k8s.io/v1", "NetworkPolicy"),
}


@dataclass
class PodRuntime:
    """What the stand-in's kubelet runs for one pod."""

    server: Optional[uvicorn.Server] = None
    task: Optional[asyncio.Task[Any]] = None
    port: Optional[int] = None
    sock: Optional[socket.socket] = None
    log: list[str] = field(default_factory=list)
    deadline: Optional[asyncio.TimerHandle] = None


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def status(code: int, reason: str, message: str, **details: Any) -> JSONResponse:
    return JSONResponse(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "details": details,
            "code": code,
        },
        status_code=code,
    )


def matches(labels: dict[str, str], selector: str) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.split("=", 1)
            if labels.get(key) != value.lstrip("="):
                return False
        elif term not in labels:
            return False
    return True


class KubeStandIn:
    """The API server double. `images` maps an image to the ASGI app ("module:attr") it runs."""

    def __init__(self, images: dict[str, str], token: str = "standin-token") -> None:
        self.images = images
        self.token = token
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.runtimes: dict[tuple[str, str], PodRuntime] = {}
        self.requests: list[tuple[str, str]] = []
        self.rejected: list[str] = []
        #: Cleared: service creations wait until it is set (a slow API server, mid-start).
        self.services_gate = threading.Event()
        self.services_gate.set()
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.url = ""

    # -- what tests look at ----------------------------------------------------------------

    def names(self, plural: str, namespace: str = "default") -> list[str]:
        return sorted(n for (p, ns, n) in list(self.objects) if p == plural and ns == namespace)

    def get(self, plural: str, name: str, namespace: str = "default") -> Optional[dict[str, Any]]:
        obj = self.objects.get((plural, namespace, name))
        return copy.deepcopy(obj) if obj is not None else None

    def add(self, manifest: dict[str, Any], namespace: str = "default") -> dict[str, Any]:
        """Create an object as another client would (a trainer's pod, a leftover)."""
        response = self._call(self._create(_plural(manifest["kind"]), namespace, manifest))
        assert response.status_code == 201, bytes(response.body).decode()
        created: dict[str, Any] = json.loads(bytes(response.body))
        return created

    def kill_pod(self, name: str, namespace: str = "default") -> None:
        """End a pod as a crash would: its server stops at once, the pod is Failed (137)."""
        self._call(self._end_pod(namespace, name, "Error", 137))

    def _call(self, coroutine: Any) -> Any:
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(60)

    def kubeconfig(self, folder: Path, namespace: Optional[str] = None) -> Path:
        context: dict[str, Any] = {"cluster": "standin", "user": "trainer"}
        if namespace:
            context["namespace"] = namespace
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "standin", "cluster": {"server": self.url}}],
            "users": [{"name": "trainer", "user": {"token": self.token}}],
            "contexts": [{"name": "standin", "context": context}],
            "current-context": "standin",
        }
        path = folder / "kubeconfig"
        path.write_text(json.dumps(config))  # JSON is YAML
        return path

    # -- the HTTP API ------------------------------------------------------------------------

    def app(self) -> Starlette:
        core = "/api/v1/namespaces/{namespace}/{plural}"
        networking = "/apis/networking.k8s.io/v1/namespaces/{namespace}/{plural}"
        return Starlette(
            routes=[
                Route("/version", self.version),
                Route("/api/v1/nodes", self.nodes),
                Route(core, self.collection, methods=["GET", "POST"]),
                Route(core + "/{name}", self.item, methods=["GET", "DELETE"]),
                Route(core + "/{name}/log", self.log),
                Route(networking, self.collection, methods=["GET", "POST"]),
                Route(networking + "/{name}", self.item, methods=["GET", "DELETE"]),
            ]
        )

    def _authorized(self, request: Request) -> bool:
        self.requests.append((request.method, request.url.path))
        return request.headers.get("authorization") == f"Bearer {self.token}"

    async def version(self, request: Request) -> Response:
        if not self._authorized(request):
            return status(401, "Unauthorized", "Unauthorized")
        major, minor, _ = KUBERNETES_VERSION.split(".")
        return JSONResponse(
            {
                "major": major,
                "minor": minor,
                "gitVersion": f"v{KUBERNETES_VERSION}-standin",
                "gitCommit": "0" * 40,
                "gitTreeState": "clean",
                "buildDate": "2026-01-01T00:00:00Z",
                "goVersion": "go1.25",
                "compiler": "gc",
                "platform": "linux/amd64",
            }
        )

    async def nodes(self, request: Request) -> Response:
        if not self._authorized(request):
            return status(401, "Unauthorized", "Unauthorized")
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "standin-node", "uid": "node-uid"},
            "status": {
                "addresses": [
                    {"type": "InternalIP", "address": "127.0.0.1"},
                    {"type": "Hostname", "address": "standin-node"},
                ]
            },
        }
        return JSONResponse(
            {"apiVersion": "v1", "kind": "NodeList", "metadata": {}, "items": [node]}
        )

    async def collection(self, request: Request) -> Response:
        if not self._authorized(request):
            return status(401, "Unauthorized", "Unauthorized")
        namespace, plural = request.path_params["namespace"], request.path_params["plural"]
        if plural not in KINDS:
            return status(404, "NotFound", f"the server could not find the resource {plural}")
        if request.method == "POST":
            return await self._create(plural, namespace, await request.json())
        selector = request.query_params.get("labelSelector", "")
        items = [
            obj
            for (p, ns, _), obj in sorted(self.objects.items())
            if p == plural
            and ns == namespace
            and matches(obj["metadata"].get("labels", {}), selector)
        ]
        api_version, kind = KINDS[plural]
        return JSONResponse(
            {
                "apiVersion": api_version,
                "kind": kind + "List",
                "metadata": {"resourceVersion": str(len(self.requests))},
                "items": items,
            }
        )

    async def item(self, request: Request) -> Response:
        if not self._authorized(request):
            return status(401, "Unauthorized", "Unauthorized")
        namespace, plural = request.path_params["namespace"], request.path_params["plural"]
        name = request.path_params["name"]
        obj = self.objects.get((plural, namespace, name))
        if obj is None:
            return status(404, "NotFound", f'{plural} "{name}" not found', name=name, kind=plural)
        if request.method == "GET":
            return JSONResponse(obj)
        await self._delete(plural, namespace, name)
        if plural == "networkpolicies":
            return JSONResponse(
                {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
            )
        return JSONResponse(obj)

    async def log(self, request: Request) -> Response:
        if not self._authorized(request):
            return status(401, "Unauthorized", "Unauthorized")
        namespace, name = request.path_params["namespace"], request.path_params["name"]
        if ("pods", namespace, name) not in self.objects:
            return status(404, "NotFound", f'pods "{name}" not found', name=name, kind="pods")
        lines = self.runtimes.get((namespace, name), PodRuntime()).log
        tail = int(request.query_params.get("tailLines", len(lines) or 1))
        return PlainTextResponse("".join(line + "\n" for line in lines[-tail:]))

    # -- objects -------------------------------------------------------------------------------

    async def _create(self, plural: str, namespace: str, body: dict[str, Any]) -> Response:
        import kubernetes_validate

        name = (body.get("metadata") or {}).get("name")
        if not name:
            return status(422, "Invalid", f"{plural}: metadata.name: Required value")
        try:
            kubernetes_validate.validate(body, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            self.rejected.append(f"{plural}/{name}: {exc.message}")
            return status(422, "Invalid", f"{plural} {name!r} is invalid: {exc.message}")
        if (plural, namespace, name) in self.objects:
            return status(409, "AlreadyExists", f'{plural} "{name}" already exists', name=name)
        obj = copy.deepcopy(body)
        metadata = obj["metadata"]
        metadata.update(
            namespace=namespace,
            uid=str(uuid.uuid4()),
            resourceVersion=str(len(self.requests)),
            creationTimestamp=_now(),
        )
        if plural == "pods":
            obj["status"] = {"phase": "Pending", "conditions": [], "startTime": _now()}
            self.objects[(plural, namespace, name)] = obj
            # The pod's port is bound at once: its service may be created before it serves.
            sock = _bind_node_port()
            self.runtimes[(namespace, name)] = PodRuntime(port=sock.getsockname()[1], sock=sock)
            assert self.loop is not None
            self.loop.create_task(self._run_pod(namespace, name))
        elif plural == "services":
            await asyncio.to_thread(self.services_gate.wait, 60)
            self._expose(namespace, obj)
            self.objects[(plural, namespace, name)] = obj
        else:
            self.objects[(plural, namespace, name)] = obj
        return JSONResponse(obj, status_code=201)

    def _expose(self, namespace: str, service: dict[str, Any]) -> None:
        """Give the service a cluster IP and, for NodePort/LoadBalancer, the port its pod's
        server listens on (the stand-in's node forwards nothing: the pod binds it)."""
        spec = service["spec"]
        spec["clusterIP"] = f"10.96.{random.randint(0, 255)}.{random.randint(1, 254)}"
        service["status"] = {"loadBalancer": {}}
        if spec.get("type") not in ("NodePort", "LoadBalancer"):
            return
        selector = spec.get("selector") or {}
        for (p, ns, name), obj in self.objects.items():
            if (
                p == "pods"
                and ns == namespace
                and matches(
                    obj["metadata"].get("labels", {}),
                    ",".join(f"{k}={v}" for k, v in selector.items()),
                )
            ):
                port = self.runtimes[(ns, name)].port
                for entry in spec["ports"]:
                    entry["nodePort"] = port
                if spec["type"] == "LoadBalancer":
                    service["status"] = {"loadBalancer": {"ingress": [{"ip": "127.0.0.1"}]}}
                return

    async def _delete(self, plural: str, namespace: str, name: str) -> None:
        obj = self.objects.pop((plural, namespace, name), None)
        if obj is None:
            return
        if plural == "pods":
            await self._stop_runtime(namespace, name)
            self.runtimes.pop((namespace, name), None)
        uid = obj["metadata"]["uid"]
        for (p, ns, n), other in list(self.objects.items()):
            references = other["metadata"].get("ownerReferences") or ()
            if ns == namespace and any(ref.get("uid") == uid for ref in references):
                await self._delete(p, ns, n)

    # -- the kubelet -----------------------------------------------------------------------------

    async def _run_pod(self, namespace: str, name: str) -> None:
        pod = self.objects[("pods", namespace, name)]
        runtime = self.runtimes[(namespace, name)]
        container = pod["spec"]["containers"][0]
        app_path = self.images.get(container["image"])
        if app_path is None:
            if runtime.sock is not None:
                runtime.sock.close()
            pod["status"]["containerStatuses"] = [
                {
                    "name": container["name"],
                    "image": container["image"],
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {
                        "waiting": {
                            "reason": "ErrImagePull",
                            "message": f"pull access denied for {container['image']}",
                        }
                    },
                }
            ]
            return
        app = await asyncio.to_thread(load_app, app_path, {})
        sock = runtime.sock
        assert sock is not None
        runtime.server, runtime.task = start_server(app, sock)
        runtime.log.append(f"standin kubelet: {container['image']} serving on :{runtime.port}")
        pod["status"].update(
            phase="Running",
            podIP="127.0.0.1",
            containerStatuses=[
                {
                    "name": container["name"],
                    "image": container["image"],
                    "imageID": "standin",
                    "ready": False,
                    "restartCount": 0,
                    "started": True,
                    "state": {"running": {"startedAt": _now()}},
                }
            ],
        )
        deadline = pod["spec"].get("activeDeadlineSeconds")
        if deadline:
            runtime.deadline = asyncio.get_running_loop().call_later(
                deadline,
                lambda: asyncio.ensure_future(
                    self._end_pod(namespace, name, "DeadlineExceeded", 137)
                ),
            )
        probe = container.get("readinessProbe", {}).get("httpGet", {}).get("path", "/")
        async with httpx.AsyncClient(trust_env=False) as http:
            while ("pods", namespace, name) in self.objects and pod["status"]["phase"] == "Running":
                with contextlib.suppress(httpx.HTTPError):
                    response = await http.get(f"http://127.0.0.1:{runtime.port}{probe}")
                    if response.status_code == 200:
                        pod["status"]["conditions"] = [
                            {"type": "Ready", "status": "True", "lastTransitionTime": _now()}
                        ]
                        pod["status"]["containerStatuses"][0]["ready"] = True
                        return
                await asyncio.sleep(0.05)

    async def _stop_runtime(self, namespace: str, name: str) -> None:
        runtime = self.runtimes.get((namespace, name))
        if runtime is not None and runtime.server is None and runtime.sock is not None:
            runtime.sock.close()
        if runtime is None or runtime.server is None:
            return
        if runtime.deadline is not None:
            runtime.deadline.cancel()
        await stop_server(runtime.server, runtime.task)
        runtime.server = None
        if runtime.sock is not None:
            runtime.sock.close()

    async def _end_pod(self, namespace: str, name: str, reason: str, code: int) -> None:
        pod = self.objects.get(("pods", namespace, name))
        if pod is None:
            return
        await self._stop_runtime(namespace, name)
        statuses = pod["status"].get("containerStatuses") or [{"name": "env"}]
        for entry in statuses:
            entry.update(
                ready=False,
                state={"terminated": {"exitCode": code, "reason": reason, "finishedAt": _now()}},
            )
        pod["status"].update(
            phase="Failed",
            reason=reason,
            message=f"the pod ended: {reason}",
            conditions=[{"type": "Ready", "status": "False"}],
            containerStatuses=statuses,
        )


def _plural(kind: str) -> str:
    return next(p for p, (_, k) in KINDS.items() if k == kind)


@contextlib.contextmanager
def running_standin(images: dict[str, str]) -> Iterator[KubeStandIn]:
    """The stand-in on a loopback port, on its own thread and event loop, until the block ends."""
    standin = KubeStandIn(images)

    async def stop_pods() -> None:
        for namespace, name in list(standin.runtimes):
            await standin._stop_runtime(namespace, name)

    with serve_standin(standin.app(), stop_pods) as (url, loop):
        standin.url, standin.loop = url, loop
        yield standin
