"""What the Docker and Swarm providers share: the engine client and reading engine listings.

The Docker SDK is imported here on first use only, so `import openenv.providers` never loads
it. Whether a container or service exists is decided by listing it with a name filter and
reading the result (`parse_containers`, `parse_services`): an empty listing means gone, an
engine that does not answer means unreachable. No decision reads an engine's error text, which
differs between Docker releases and Podman.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Optional

from .base import ProviderError, ProviderUnavailableError
from .ownership import LABEL_PREFIX, MANAGED_LABEL

#: Which provider made a container/service, and from what.
PROVIDER_LABEL = LABEL_PREFIX + "provider"
TARGET_LABEL = LABEL_PREFIX + "target"
CREATED_LABEL = LABEL_PREFIX + "created"
#: Epoch seconds after which the resource is over its wall time (`collect_orphans` removes it).
DEADLINE_LABEL = LABEL_PREFIX + "deadline"
#: Host folder holding the Unix socket of a container without network (deleted with it).
SOCKET_DIR_LABEL = LABEL_PREFIX + "socket-dir"
SOCKET_DIR_PREFIX = "openenv-docker-"

#: How every container of an environment runs unless its owner relaxes it: no capabilities,
#: no-new-privileges, a read-only root with a private in-memory /tmp (the images set HOME=/tmp,
#: so caches land there). `DockerProvider` starts containers with it, `docker_run_command`
#: spells it for `docker run`, and the image tests run every reference image under it.
HARDENING: dict[str, Any] = {
    "cap_drop": ["ALL"],
    "security_opt": ["no-new-privileges"],
    "read_only": True,
    "tmpfs": {"/tmp": "rw,nosuid,nodev"},
}


def docker_run_command(image: str, port: int = 8000) -> str:
    """The hardened `docker run` line for an environment image, published on loopback only."""
    flags = ["--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--read-only"]
    for path, options in HARDENING["tmpfs"].items():
        flags += ["--tmpfs", f"{path}:{options}"]
    flags += ["-p", f"127.0.0.1:{port}:{port}"]
    return " ".join(["docker", "run", "--rm", *flags, image])


#: Resource names: safe in a regular expression and as a container/service name.
_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")

_client_lock = threading.Lock()
_clients: dict[int, Any] = {}
_reachable_pid: Optional[int] = None


def sdk() -> Any:
    """The `docker` package, or `ProviderUnavailableError` saying how to install it."""
    try:
        import docker
        import docker.errors
        import docker.types
    except ImportError:
        raise ProviderUnavailableError(
            "the Docker SDK for Python is not installed: pip install 'openenv[docker]'"
        ) from None
    return docker


def engine() -> Any:
    """One SDK client of the local engine per process (a forked child makes its own)."""
    pid = os.getpid()
    with _client_lock:
        client = _clients.get(pid)
        if client is None:
            docker = sdk()
            try:
                client = docker.from_env()
            except docker.errors.DockerException as exc:
                raise ProviderUnavailableError(_unreachable(exc)) from None
            _clients.clear()
            _clients[pid] = client
        return client


def check_engine() -> None:
    """Raise `ProviderUnavailableError` (one line) unless an engine answers; checked once per
    process (a later outage shows up as `ProviderError` from the call that meets it)."""
    global _reachable_pid
    if _reachable_pid == os.getpid():
        return
    docker = sdk()
    try:
        engine().ping()
    except docker.errors.DockerException as exc:
        raise ProviderUnavailableError(_unreachable(exc)) from None
    except OSError as exc:
        raise ProviderUnavailableError(_unreachable(exc)) from None
    _reachable_pid = os.getpid()


def _unreachable(exc: BaseException) -> str:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return (
        f"no Docker engine answers ({first[:160]}): install Docker Engine and start it "
        "(`dockerd` or `systemctl start docker`), or set DOCKER_HOST"
    )


def engine_call(what: str, call: Callable[[], Any]) -> Any:
    """Run one engine request; an engine that fails to answer becomes a `ProviderError`."""
    docker = sdk()
    try:
        return call()
    except (docker.errors.DockerException, OSError) as exc:
        raise ProviderError(f"the Docker engine failed to {what}: {exc}") from exc


def resource_name(kind: str, target: str, suffix: str) -> str:
    """`openenv-<kind>-<image name>-<suffix>`: readable in `docker ps`, unique by `suffix`."""
    base = target.rsplit("/", 1)[-1].split("@", 1)[0].split(":", 1)[0].lower()
    base = re.sub(r"[^a-z0-9]+", "-", base).strip("-")[:24] or "env"
    name = f"openenv-{kind}-{base}-{suffix}"
    assert _NAME.fullmatch(name), name
    return name


def name_filter(name: str) -> str:
    """The `name` filter matching exactly `name`: Docker matches it against "/name", Podman
    against "name", so the slash is optional (and the listing is checked by `has_name`)."""
    if not _NAME.fullmatch(name):
        raise ValueError(f"not a resource name of ours: {name!r}")
    return f"^/?{name}$"


# -- listings ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Listed:
    """One container or service as an engine's listing shows it."""

    id: str
    names: tuple[str, ...]
    labels: dict[str, str] = field(default_factory=dict)
    #: "running", "exited", "created", ... for containers; "service" for services.
    state: str = ""
    created: float = 0.0
    #: Host addresses of published ports, "127.0.0.1:32768".
    published: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.names[0] if self.names else self.id


def _items(payload: Any) -> list[Mapping[str, Any]]:
    """The objects of a listing: an API's JSON array (already decoded or not), or the CLI's
    one-JSON-object-per-line output (`docker ps --format '{{json .}}'`)."""
    if isinstance(payload, bytes):
        payload = payload.decode()
    if isinstance(payload, str):
        text = payload.strip()
        if not text:
            return []
        if text.startswith("["):
            payload = json.loads(text)
        else:
            return [json.loads(line) for line in text.splitlines() if line.strip()]
    if payload is None:
        return []
    if isinstance(payload, Mapping):
        return [payload]
    return list(payload)


def _labels(value: Any) -> dict[str, str]:
    if isinstance(value, Mapping):
        return {str(k): str(v) for k, v in value.items()}
    if isinstance(value, str) and value:
        # The Docker CLI's table/JSON format joins labels as "k=v,k2=v2".
        return dict(pair.partition("=")[::2] for pair in value.split(",") if pair)
    return {}


def _timestamp(value: Any) -> float:
    """Epoch seconds from an int (API) or a date string (CLI, services)."""
    if isinstance(value, (int, float)):
        return float(value)
    if not isinstance(value, str) or not value:
        return 0.0
    text = value.strip()
    # "2026-12-01 17:05:18 +0000 UTC" (Docker CLI) / "2026-12-01T17:05:18.123456789Z" (API).
    text = text.replace(" UTC", "").replace("Z", "+00:00")
    text = re.sub(r"(\.\d{6})\d+", r"\1", text)
    for fmt in ("%Y-%m-%d %H:%M:%S %z", "%Y-%m-%dT%H:%M:%S.%f%z", "%Y-%m-%dT%H:%M:%S%z"):
        with contextlib.suppress(ValueError):
            return datetime.strptime(text, fmt).timestamp()
    return 0.0


def _ports(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        # CLI: "127.0.0.1:32768->8000/tcp, ..."
        return tuple(p.split("->")[0].strip() for p in value.split(",") if "->" in p)
    out = []
    for port in value or ():
        if not isinstance(port, Mapping):
            continue
        public = port.get("PublicPort") or port.get("host_port") or port.get("PublishedPort")
        if public:
            host = port.get("IP") or port.get("host_ip") or "0.0.0.0"
            out.append(f"{host}:{public}")
    return tuple(out)


def parse_containers(payload: Any) -> list[Listed]:
    """Containers from a listing of Docker (API or CLI, 20.10 to 29) or Podman (its Docker
    API or `podman ps --format json`). Names lose Docker's leading slash."""
    listed = []
    for item in _items(payload):
        names = item.get("Names") or ()
        if isinstance(names, str):
            names = names.split(",")
        state = item.get("State") or ""
        if isinstance(state, Mapping):  # some Podman releases nest it
            state = state.get("Status", "")
        created = item.get("Created")
        if not isinstance(created, (int, float)):
            created = item.get("CreatedAt", created)
        listed.append(
            Listed(
                id=str(item.get("Id") or item.get("ID") or ""),
                names=tuple(str(n).strip().lstrip("/") for n in names if str(n).strip()),
                labels=_labels(item.get("Labels")),
                state=str(state).lower(),
                created=_timestamp(created),
                published=_ports(item.get("Ports")),
            )
        )
    return listed


def parse_services(payload: Any) -> list[Listed]:
    """Services from `GET /services` (Docker API) or `docker service ls --format '{{json .}}'`."""
    listed = []
    for item in _items(payload):
        spec = item.get("Spec") or {}
        name = spec.get("Name") or item.get("Name") or ""
        labels = spec.get("Labels") if spec else item.get("Labels")
        ports = (item.get("Endpoint") or {}).get("Ports") or item.get("Ports") or ()
        listed.append(
            Listed(
                id=str(item.get("ID") or item.get("Id") or ""),
                names=(str(name),) if name else (),
                labels=_labels(labels),
                state="service",
                created=_timestamp(item.get("CreatedAt")),
                published=_ports(ports),
            )
        )
    return listed


def has_name(listing: Iterable[Listed], name: str) -> bool:
    """Whether `name` is in a listing (exactly: a filter is a regular expression)."""
    return any(name in item.names for item in listing)


def wait_gone(list_named: Callable[[], list[Listed]], name: str, timeout_s: float = 30.0) -> None:
    """Poll a name-filtered listing until `name` is absent; `ProviderError` if it stays."""
    deadline = time.monotonic() + timeout_s
    delay = 0.01
    while has_name(list_named(), name):
        if time.monotonic() >= deadline:
            raise ProviderError(
                f"{name} is still listed by the Docker engine {timeout_s:g} s after its "
                f"removal; remove it by hand (`docker rm -f {name}`) and check the engine"
            )
        time.sleep(delay)
        delay = min(delay * 2, 0.25)


# -- the host folder of a container's Unix socket ------------------------------------------------


def make_socket_dir() -> tuple[Path, Path]:
    """A host folder for one container's socket: (the private parent, the shared child).

    The parent (0700) keeps other host users out; the child (0777) is bind-mounted so the
    container's unprivileged user can create the socket in it whatever its uid."""
    parent = Path(tempfile.mkdtemp(prefix=SOCKET_DIR_PREFIX))
    child = parent / "sock"
    child.mkdir()
    child.chmod(0o777)
    return parent, child


def remove_socket_dir(path: Optional[str]) -> None:
    """Delete a folder made by `make_socket_dir` (and nothing else, whatever a label says)."""
    if not path:
        return
    folder = Path(path)
    if (
        folder.name.startswith(SOCKET_DIR_PREFIX)
        and folder.parent.resolve() == Path(tempfile.gettempdir()).resolve()
    ):
        shutil.rmtree(folder, ignore_errors=True)


def managed_filter(provider: str) -> dict[str, Any]:
    return {"label": [f"{MANAGED_LABEL}=1", f"{PROVIDER_LABEL}={provider}"]}
