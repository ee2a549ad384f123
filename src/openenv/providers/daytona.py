"""Daytona provider: each environment a Daytona sandbox, reached through its preview URL.

Through the official `daytona` SDK (imported on first use). A start creates a sandbox of the
spec's image (or of a snapshot, `from_snapshot=True`: no build, the fast path on Daytona) with
the spec's resources, starts the environment server in it in a background session, and hands
the trainer the sandbox's preview URL of the server's port with its access token (sent as the
`X-Daytona-Preview-Token` header by the client and the health probe; the sandbox stays private).
A stop deletes the sandbox.

Creation limits: Daytona caps sandbox creations per organisation. `max_creates_per_s` is what
this provider paces its own creations to (and what `EnvFleet` reads to pace a fleet); a 429
answer is retried with exponential backoff and jitter (the `Retry-After` header when the
service sends one), up to `create_retries` times, then it is a `ProviderError`.

Limits: `cpus` and `memory_mb` round up to Daytona's whole cores and GiB; `wall_time_s` becomes
the sandbox's TTL (whole minutes; Daytona destroys it) plus a deadline label for gc; `pids` is
not enforced (`info["limits_not_enforced"]`). Network "none" is `network_block_all`. An idle
sandbox stops after `auto_stop_minutes` (Daytona's own idle timer) and is deleted when it stops,
so a trainer killed without clean-up leaves nothing running for long.

Ownership: the owner (org.openenv.* as on Docker containers) is in the sandbox's labels;
`resources()` lists the account's sandboxes with `org.openenv.provider=daytona`, and
`collect_orphans()` deletes those whose owner is known dead or whose wall time is over.

Credentials: `DAYTONA_API_KEY` (and `DAYTONA_API_URL`, `DAYTONA_TARGET`) as the SDK reads them,
or `api_key=`, `api_url=`, `target=`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import math
import os
import random
import re
import threading
import time
import uuid
from typing import Any, ClassVar, Optional

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
from .ownership import Owner
from .spec import EnvSpec, ResourceLimits

logger = logging.getLogger("openenv.providers.daytona")

PREVIEW_TOKEN_HEADER = "X-Daytona-Preview-Token"
SERVER_SESSION = "openenv-server"
#: Sandbox states after which it never serves again.
_GONE_STATES = {"destroyed", "destroying", "error", "build_failed", "stopped", "archived"}


def sdk() -> Any:
    """The `daytona` package, or `ProviderUnavailableError` saying how to install it."""
    try:
        import daytona
    except ImportError:
        raise ProviderUnavailableError(
            "the Daytona SDK is not installed: pip install 'openenv[daytona]'"
        ) from None
    return daytona


def server_command(image: str, port: int = CONTAINER_PORT) -> str:
    """The command `openenv build` images run (`openenv-<name>` serves `<name>_env`)."""
    base = image.rsplit("/", 1)[-1].split("@", 1)[0].split(":", 1)[0]
    match = re.fullmatch(r"openenv-([a-z0-9_-]+)", base)
    if not match:
        raise ProviderError(
            f"daytona: cannot tell which server image {image!r} runs; pass command=..."
        )
    package = match.group(1).replace("-", "_") + "_env"
    return f"python -m {package}.server.app --host 0.0.0.0 --port {port}"


class _Pacer:
    """At most `rate` creations a second from this process (shared by the class's instances)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next = 0.0

    def wait(self, rate: float) -> None:
        if rate <= 0:
            return
        with self._lock:
            now = time.monotonic()
            slot = max(now, self._next)
            self._next = slot + 1.0 / rate
        if slot > now:
            time.sleep(slot - now)


class DaytonaProvider(Provider):
    """Starts each environment as a Daytona sandbox of the spec's image (or snapshot).

    `command` is the server's command line in the sandbox (default: the one of `openenv build`
    images, from the image's name); `port` the port it serves on. `from_snapshot=True` reads the
    spec's target as a snapshot name. `auto_stop_minutes` is the idle time after which Daytona
    stops (and so deletes) the sandbox; `create_retries` bounds the retries of rate-limited
    creations.
    """

    name = "daytona"
    default_network = "egress"
    target_kind = "image"
    #: Sandbox creations per second this provider allows itself (Daytona caps them).
    max_creates_per_s: ClassVar[float] = 2.0
    #: A start asks Daytona about its sandbox at most once a second.
    liveness_interval_s = 1.0
    _pacer: ClassVar[_Pacer] = _Pacer()

    def __init__(
        self,
        *,
        api_key: Optional[str] = None,
        api_url: Optional[str] = None,
        target: Optional[str] = None,
        command: Optional[str] = None,
        port: int = CONTAINER_PORT,
        from_snapshot: bool = False,
        auto_stop_minutes: int = 60,
        create_retries: int = 8,
        default_limits: ResourceLimits = ResourceLimits(),
    ) -> None:
        super().__init__()
        self._config = {"api_key": api_key, "api_url": api_url, "target": target}
        self._client: Optional[Any] = None
        self.command = command
        self.port = port
        self.from_snapshot = from_snapshot
        self.auto_stop_minutes = auto_stop_minutes
        self.create_retries = create_retries
        self.default_limits = default_limits
        self._sandboxes: dict[str, Any] = {}
        if api_key:
            # Explicit credentials: the environment's are not needed.
            self.check_available = sdk  # type: ignore[method-assign]

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = _make_client(**self._config)
        return self._client

    # -- availability and listing -----------------------------------------------------------

    @classmethod
    def check_available(cls) -> None:
        # Whether it is installed, without importing it (seconds): `openenv ps` asks every
        # provider, and most machines have no Daytona credentials.
        if importlib.util.find_spec("daytona") is None:
            sdk()
        if not (os.environ.get("DAYTONA_API_KEY") or os.environ.get("DAYTONA_JWT_TOKEN")):
            raise ProviderUnavailableError(
                "no Daytona credentials: set DAYTONA_API_KEY (and DAYTONA_API_URL for a "
                "self-hosted Daytona)"
            )

    @classmethod
    def resources(cls) -> list[Resource]:
        return [resource for resource, _ in cls._listed(_make_client())]

    @classmethod
    def _listed(cls, client: Any) -> list[tuple[Resource, float]]:
        daytona = sdk()
        query = daytona.ListSandboxesQuery(
            labels={dk.MANAGED_LABEL: "1", dk.PROVIDER_LABEL: cls.name}
        )
        out = []
        for sandbox in _call("list sandboxes", lambda: list(client.list(query))):
            labels = dict(sandbox.labels or {})
            owner = Owner.from_labels(labels)
            state = _state(sandbox)
            resource = Resource(
                id=sandbox.id,
                provider=cls.name,
                target=labels.get(dk.TARGET_LABEL, ""),
                owner=owner,
                owner_alive=owner.is_alive() if owner else None,
                running=state == "started",
                created_at=_float(labels.get(dk.CREATED_LABEL)),
                address=labels.get(dk.TARGET_LABEL, ""),
            )
            out.append((resource, _float(labels.get(dk.DEADLINE_LABEL), math.inf)))
        return out

    @classmethod
    def remove_resource(cls, resource: Resource) -> None:
        _delete(_make_client(), resource.id)

    @classmethod
    def _collectable(cls) -> list[Resource]:
        """Sandboxes whose owner is gone, and those past their wall time."""
        now = time.time()
        return [r for r, deadline in cls._listed(_make_client()) if r.orphaned or deadline < now]

    # -- start and stop ---------------------------------------------------------------------

    async def _start(self, spec: EnvSpec) -> StartedEnv:
        name = dk.resource_name("daytona", spec.target, uuid.uuid4().hex[:10])
        owner = Owner.current()
        client = self.client
        return await create_in_thread(
            self, lambda: self._create(spec, name, owner), lambda env: _delete(client, env.id)
        )

    async def close(self) -> None:
        """Stop everything this provider started, and finish removals of cancelled starts."""
        await super().close()
        await wait_for_cleanups(self)

    def _create(self, spec: EnvSpec, name: str, owner: Owner) -> StartedEnv:
        """Create the sandbox and start the server in it; a failure leaves nothing behind."""
        daytona = sdk()
        network = spec.network or self.default_network
        limits = ResourceLimits(
            **{**self.default_limits.model_dump(), **spec.limits.model_dump(exclude_none=True)}
        )
        command = self.command or server_command(spec.target, self.port)
        labels = {
            **owner.labels(),
            dk.PROVIDER_LABEL: self.name,
            dk.TARGET_LABEL: spec.target,
            dk.CREATED_LABEL: f"{time.time():.3f}",
        }
        common: dict[str, Any] = {
            "name": name,
            "env_vars": {"HOME": "/tmp", **spec.env_vars},
            "labels": labels,
            "public": False,
            "network_block_all": network == "none",
            "auto_stop_interval": self.auto_stop_minutes,
            "auto_delete_interval": 0,  # deleted as soon as it stops
        }
        if limits.wall_time_s:
            common["ttl_minutes"] = max(1, math.ceil(limits.wall_time_s / 60))
            labels[dk.DEADLINE_LABEL] = f"{time.time() + limits.wall_time_s:.3f}"
        if self.from_snapshot:
            params = daytona.CreateSandboxFromSnapshotParams(snapshot=spec.target, **common)
        else:
            resources = daytona.Resources(
                cpu=math.ceil(limits.cpus) if limits.cpus else None,
                memory=math.ceil(limits.memory_mb / 1024) if limits.memory_mb else None,
            )
            params = daytona.CreateSandboxFromImageParams(
                image=spec.target, resources=resources, **common
            )
        sandbox = self._create_sandbox(params, name, spec.ready_timeout_s)
        try:
            process = sandbox.process
            _call("create the server's session", lambda: process.create_session(SERVER_SESSION))
            started = _call(
                "start the environment server",
                lambda: process.execute_session_command(
                    SERVER_SESSION, daytona.SessionExecuteRequest(command=command, run_async=True)
                ),
            )
            link = _call("get the preview link", lambda: sandbox.get_preview_link(self.port))
        except BaseException:
            with contextlib.suppress(Exception):
                _delete(self.client, sandbox.id)
            raise
        self._sandboxes[sandbox.id] = sandbox
        return StartedEnv(
            id=sandbox.id,
            provider=self.name,
            spec=spec,
            base_url=str(link.url).rstrip("/"),
            owner=owner,
            headers={PREVIEW_TOKEN_HEADER: str(link.token)} if link.token else {},
            info={
                "sandbox": sandbox.id,
                "name": name,
                "command": command,
                "command_id": getattr(started, "cmd_id", None),
                "image" if not self.from_snapshot else "snapshot": spec.target,
                "network": network,
                "limits": limits.model_dump(exclude_none=True),
                "limits_not_enforced": ["pids"] if limits.pids else [],
            },
        )

    def _create_sandbox(self, params: Any, name: str, timeout_s: float) -> Any:
        """`Daytona.create`, paced to `max_creates_per_s` and retried on 429 with backoff."""
        daytona = sdk()
        client = self.client
        for attempt in range(self.create_retries + 1):
            type(self)._pacer.wait(self.max_creates_per_s)
            try:
                return client.create(params, timeout=timeout_s)
            except daytona.DaytonaRateLimitError as exc:
                if attempt >= self.create_retries:
                    raise ProviderError(
                        f"daytona: sandbox creation still rate-limited after "
                        f"{self.create_retries} retries; lower max_creates_per_s ({exc})"
                    ) from exc
                delay = _retry_after(exc) or min(30.0, 0.25 * 2**attempt)
                delay *= random.uniform(1.0, 1.5)
                logger.info("daytona: creation rate-limited; retrying in %.2f s", delay)
                time.sleep(delay)
            except daytona.DaytonaError as exc:
                # A create that failed late (a timeout) may have made the sandbox: by name.
                with contextlib.suppress(Exception):
                    _delete(client, name)
                raise ProviderError(f"daytona: could not create a sandbox: {exc}") from exc
        raise AssertionError("unreachable")

    async def _stop(self, env: StartedEnv) -> None:
        self._sandboxes.pop(env.id, None)
        await run_blocking(_delete, self.client, env.id)

    async def _alive(self, env: StartedEnv) -> bool:
        return await run_blocking(self._sandbox_alive, env)

    def _sandbox_alive(self, env: StartedEnv) -> bool:
        """False once the sandbox is gone or stopped, or its server command has exited."""
        daytona = sdk()
        try:
            sandbox = self.client.get(env.id)
        except daytona.DaytonaNotFoundError:
            return False
        except daytona.DaytonaError as exc:
            raise ProviderError(f"daytona: could not read sandbox {env.id}: {exc}") from exc
        if _state(sandbox) in _GONE_STATES:
            return False
        command_id = env.info.get("command_id")
        if command_id:
            command = _call(
                "read the server's command",
                lambda: sandbox.process.get_session_command(SERVER_SESSION, command_id),
            )
            if command.exit_code is not None:
                return False
        return True

    async def log_tail(self, env: StartedEnv, lines: int = 40) -> str:
        return await run_blocking(self._log_tail, env, lines)

    def _log_tail(self, env: StartedEnv, lines: int) -> str:
        """The server command's last lines, and its exit code once it has one."""
        command_id = env.info.get("command_id")
        if not command_id:
            return ""
        with contextlib.suppress(ProviderError, sdk().DaytonaError):
            sandbox = self.client.get(env.id)
            logs = _call(
                "read the server's output",
                lambda: sandbox.process.get_session_command_logs(SERVER_SESSION, command_id),
            )
            tail = "\n".join(str(logs.output or "").rstrip().splitlines()[-lines:])
            command = sandbox.process.get_session_command(SERVER_SESSION, command_id)
            if command.exit_code is not None:
                tail += f"\n(the server command exited with code {command.exit_code})"
            return tail.strip()
        return ""


def _make_client(
    api_key: Optional[str] = None, api_url: Optional[str] = None, target: Optional[str] = None
) -> Any:
    daytona = sdk()
    try:
        if api_key or api_url or target:
            return daytona.Daytona(
                daytona.DaytonaConfig(api_key=api_key, api_url=api_url, target=target)
            )
        return daytona.Daytona()
    except daytona.DaytonaError as exc:
        raise ProviderUnavailableError(f"daytona: {str(exc).splitlines()[0]}") from None


def _call(what: str, fn: Any) -> Any:
    daytona = sdk()
    try:
        return fn()
    except daytona.DaytonaError as exc:
        raise ProviderError(f"daytona: could not {what}: {exc}") from exc


def _delete(client: Any, sandbox_id_or_name: str) -> None:
    """Delete a sandbox and wait until Daytona says it is destroyed; a missing one is fine."""
    daytona = sdk()
    try:
        sandbox = client.get(sandbox_id_or_name)
    except daytona.DaytonaNotFoundError:
        return
    except daytona.DaytonaError as exc:
        raise ProviderError(f"daytona: could not read {sandbox_id_or_name}: {exc}") from exc
    try:
        client.delete(sandbox, timeout=60, wait=True)
    except daytona.DaytonaNotFoundError:
        return
    except daytona.DaytonaError as exc:
        raise ProviderError(f"daytona: could not delete {sandbox_id_or_name}: {exc}") from exc


def _state(sandbox: Any) -> str:
    state = getattr(sandbox, "state", None)
    return str(getattr(state, "value", state) or "").lower()


def _retry_after(exc: Any) -> Optional[float]:
    headers = getattr(exc, "headers", None) or {}
    for key, value in dict(headers).items():
        if str(key).lower() == "retry-after":
            with contextlib.suppress(TypeError, ValueError):
                return max(0.0, float(value))
    return None


def _float(value: Optional[str], default: float = 0.0) -> float:
    try:
        return float(value) if value is not None else default
    except ValueError:
        return default
