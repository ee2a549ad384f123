"""The default provider: environment servers as local child processes, forked warm.

One fork server (`zygote.py`) per interpreter and environment folder imports the environment
once; each environment is a fork of it, serving on a loopback port it binds itself (no
find-a-free-port race) or on a Unix socket. Each child leads its own process group and, where
cgroups are writable, its own cgroup, so stopping it stops everything it started.

Isolation: none beyond a separate process. The environment runs as the trainer's user with the
trainer's files and network; use the sandbox or Docker provider for untrusted code.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from functools import partial
from pathlib import Path
from typing import IO, Any, ClassVar, Literal, Optional

from openenv.isolation import cgroups

from .base import (
    EnvironmentStartError,
    Provider,
    ProviderError,
    StartedEnv,
    run_blocking,
)
from .ownership import LocalRecord, Owner, process_alive, process_start_time
from .records import LocalRecordResources, remove_record
from .spec import AppTarget, EnvSpec, SpecError, resolve_app


def runtime_dir() -> Path:
    """Short-lived files of running environments (logs, sockets): private to this user."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    root = (
        Path(base) / "openenv" if base else Path(tempfile.gettempdir()) / f"openenv-{os.getuid()}"
    )
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    return root


def new_id(provider: str, name: str) -> str:
    slug = "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")[:24] or "env"
    return f"{provider}-{slug}-{secrets.token_hex(4)}"


def tail(path: Path, lines: int = 40) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 64 * 1024))
            data = handle.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(deque(data.splitlines(), maxlen=lines))


class ForkServer:
    """The trainer's handle on one zygote process: JSON lines over its stdin/stdout."""

    def __init__(
        self,
        python: str,
        root: Optional[Path],
        extra_env: dict[str, str],
        *,
        wrap: Optional[list[str]] = None,
        pass_fds: tuple[int, ...] = (),
        clear_env: bool = False,
        log_dir: Optional[Path] = None,
    ) -> None:
        """`wrap` is a command prefix the zygote runs under (the sandbox's bwrap, with
        `pass_fds` open for it); `clear_env` starts it from `extra_env` alone; its log goes
        to `log_dir` (default: the runtime folder)."""
        self.python = python
        self.root = root
        self.log = (log_dir or runtime_dir()) / f"zygote-{os.getpid()}-{secrets.token_hex(3)}.log"
        env = dict(extra_env) if clear_env else {**os.environ, **extra_env}
        if root is not None:
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(root), env.get("PYTHONPATH", "")) if p
            )
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [*(wrap or ()), python, "-m", "openenv.providers.zygote"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                cwd=str(root) if root else None,
                env=env,
                start_new_session=True,
                pass_fds=pass_fds,
            )
        self._lock = threading.Lock()
        hello = self._read()
        if not hello.get("ok"):
            raise EnvironmentStartError("the fork server did not start", tail(self.log))
        # The zygote holds its log open; the name goes now, so no log outlives it, however its
        # trainer ends. `log_tail()` reads it through the zygote's descriptor.
        with contextlib.suppress(OSError):
            self.log.unlink()

    def _read(self) -> dict[str, Any]:
        stdout = self.process.stdout
        assert stdout is not None
        line = stdout.readline()
        if not line:
            self.process.poll()
            raise EnvironmentStartError(
                f"the fork server ({self.python} -m openenv.providers.zygote) exited "
                f"(code {self.process.returncode})",
                self.log_tail(),
            )
        reply: dict[str, Any] = json.loads(line)
        return reply

    def request(self, payload: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            stdin: Optional[IO[bytes]] = self.process.stdin
            assert stdin is not None
            try:
                stdin.write(json.dumps(payload).encode() + b"\n")
                stdin.flush()
            except (BrokenPipeError, ValueError) as exc:
                raise ProviderError(f"the fork server is gone: {exc}") from exc
            return self._read()

    def log_tail(self, lines: int = 40) -> str:
        """The zygote's recent output (its stderr), while it runs."""
        if self.log.exists():
            return tail(self.log, lines)
        return tail(Path(f"/proc/{self.process.pid}/fd/2"), lines)

    def release_in_child(self) -> None:
        """In a forked copy of the trainer: drop our ends of the zygote's pipes, so that the
        zygote still sees its trainer's exit (the copy does not own it)."""
        for stream in (self.process.stdin, self.process.stdout):
            with contextlib.suppress(Exception):
                if stream is not None:
                    os.close(stream.fileno())

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self, timeout: float = 5.0) -> None:
        """Closing its stdin makes the zygote kill every environment it forked, then exit."""
        with contextlib.suppress(Exception):
            if self.process.stdin:
                self.process.stdin.close()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        with contextlib.suppress(Exception):
            if self.process.stdout:
                self.process.stdout.close()
        with contextlib.suppress(OSError):
            self.log.unlink()


_fork_servers: dict[tuple[str, Optional[str]], ForkServer] = {}
_fork_servers_lock = threading.Lock()


def fork_server(python: str, root: Optional[Path]) -> ForkServer:
    """The zygote for `python` and `root` in this process, started on first use."""
    key = (python, str(root) if root else None)
    with _fork_servers_lock:
        server = _fork_servers.get(key)
        if server is None or not server.alive():
            server = ForkServer(python, root, {})
            _fork_servers[key] = server
        return server


def _close_fork_servers() -> None:
    with _fork_servers_lock:
        servers = list(_fork_servers.values())
        _fork_servers.clear()
    for server in servers:
        server.close()


def _forget_fork_servers_in_child() -> None:
    """A forked trainer child must not keep the zygotes' pipes open (nor close them)."""
    for server in _fork_servers.values():
        server.release_in_child()
    _fork_servers.clear()


atexit.register(_close_fork_servers)
os.register_at_fork(after_in_child=_forget_fork_servers_in_child)


class ProcessProvider(LocalRecordResources, Provider):
    """Environments as processes recorded under the state folder (shared with the sandbox)."""

    async def _alive(self, env: StartedEnv) -> bool:
        return process_alive(env.info["pid"], env.info.get("pid_start"))

    async def log_tail(self, env: StartedEnv, lines: int = 40) -> str:
        log = env.info.get("log")
        return tail(Path(log), lines) if log else ""

    async def _stop(self, env: StartedEnv) -> None:
        record = env.info.get("record")
        if isinstance(record, LocalRecord):
            await run_blocking(partial(remove_record, record, grace_s=1.0))


class LocalProcessProvider(ProcessProvider):
    """Environment servers as child processes of a warm fork server, on loopback.

    `transport="unix"` serves on a Unix socket instead of a port (no port used at all).
    `python` runs the environments with another interpreter (which must have openenv).
    """

    name: ClassVar[str] = "local"
    default_network: ClassVar[str] = "egress"

    def __init__(
        self,
        *,
        python: Optional[str] = None,
        transport: Literal["tcp", "unix"] = "tcp",
        host: str = "127.0.0.1",
        use_cgroups: bool = True,
    ) -> None:
        super().__init__()
        self.python = python or sys.executable
        self.transport = transport
        self.host = host
        self.use_cgroups = use_cgroups

    async def prepare(self, spec: EnvSpec | str) -> None:
        """Import the environment in the fork server now, so the first start is fast too."""
        spec = EnvSpec.of(spec)
        target = resolve_app(spec.target)
        server = await asyncio.to_thread(self._fork_server, spec, target)
        reply = await asyncio.to_thread(server.request, {"op": "preload", "app": target.app})
        if not reply.get("ok"):
            raise EnvironmentStartError(f"cannot import {target.app}", server.log_tail())

    def _check_spec(self, spec: EnvSpec) -> None:
        if spec.network == "none":
            raise SpecError(
                "the local provider cannot take the network away from an environment; use "
                "provider='sandbox' (bubblewrap) or 'docker' for network='none'"
            )

    def _fork_server(self, spec: EnvSpec, target: AppTarget) -> ForkServer:
        """The zygote that forks this spec's environment (blocking: call it in a thread)."""
        return fork_server(self.python, target.root)

    def _env_folder(self, spec: EnvSpec, target: AppTarget, env_id: str) -> Path:
        """Where the environment's socket and log go (created by the caller)."""
        return runtime_dir() / env_id

    def _adopt(self, server: ForkServer, pid: int, groups: Optional[list[str]]) -> int:
        """The trainer's pid for the child the zygote reports (the same unless namespaced).
        A subclass may also move it into `groups` here; on failure it must kill it."""
        return pid

    def _isolation(self, spec: EnvSpec, folder: Path) -> Optional[dict[str, Any]]:
        """Extra confinement the child enters before it serves (none for plain processes)."""
        return None

    async def _start(self, spec: EnvSpec) -> StartedEnv:
        self._check_spec(spec)
        target = resolve_app(spec.target)
        env_id = new_id(self.name, target.name)
        folder = self._env_folder(spec, target, env_id)
        folder.mkdir(mode=0o700)
        unix = self.transport == "unix" or spec.network == "none"
        socket_path = folder / "server.sock" if unix else None
        groups = cgroups.create(env_id, spec.limits) if self.use_cgroups else None
        owner = Owner.current()
        request = self._spawn_request(spec, target, folder, socket_path, groups)
        try:
            server = await asyncio.to_thread(self._fork_server, spec, target)
            reply = await asyncio.to_thread(server.request, request)
        except BaseException:
            for group in groups or ():
                cgroups.kill_and_remove(group)
            shutil.rmtree(folder, ignore_errors=True)
            raise
        if not reply.get("ok"):
            log = tail(folder / "server.log") or server.log_tail()
            for group in groups or ():
                cgroups.kill_and_remove(group)
            shutil.rmtree(folder, ignore_errors=True)
            raise EnvironmentStartError(f"{self.name}: {reply.get('error')}", log)
        try:
            pid = self._adopt(server, int(reply["pid"]), groups)
        except BaseException:
            for group in groups or ():
                cgroups.kill_and_remove(group)
            shutil.rmtree(folder, ignore_errors=True)
            raise
        base_url = (
            "http://localhost" if socket_path else f"http://{self._url_host()}:{reply['port']}"
        )
        record = LocalRecord(
            id=env_id,
            provider=self.name,
            owner=owner,
            pid=pid,
            pid_start=process_start_time(pid),
            created_at=time.time(),
            base_url=base_url,
            unix_socket=str(socket_path) if socket_path else None,
            cgroup=groups,
            cleanup_paths=[str(folder)],
            target=spec.target,
        )
        record.save()
        return StartedEnv(
            id=env_id,
            provider=self.name,
            spec=spec,
            base_url=base_url,
            owner=owner,
            unix_socket=record.unix_socket,
            info={
                "pid": pid,
                "pid_start": record.pid_start,
                "log": str(folder / "server.log"),
                "limits": "cgroup" if groups else "rlimit",
                "record": record,
            },
        )

    def _url_host(self) -> str:
        return f"[{self.host}]" if ":" in self.host else self.host

    def _spawn_request(
        self,
        spec: EnvSpec,
        target: AppTarget,
        folder: Path,
        socket_path: Optional[Path],
        groups: Optional[list[str]],
    ) -> dict[str, Any]:
        return {
            "op": "spawn",
            "app": target.app,
            "env": spec.env_vars,
            "host": self.host,
            "port": spec.port or 0,
            "uds": str(socket_path) if socket_path else None,
            "cgroups": groups,
            "limits": spec.limits.model_dump(exclude_none=True),
            "log": str(folder / "server.log"),
            "cwd": str(target.root) if target.root else None,
            "isolate": self._isolation(spec, folder),
        }
