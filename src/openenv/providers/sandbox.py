"""The sandbox provider: environments confined with bubblewrap and Linux namespaces, no Docker.

Two layers. The fork server runs inside one bubblewrap sandbox per interpreter, environment
folder and network policy: a new user, PID, IPC, UTS (and, for policy "none", network)
namespace; a root filesystem that is an empty tmpfs with the system folders, the interpreter,
its packages and the environment folder bound read-only; no environment variables of the
trainer beyond a short allow-list. Then every environment it forks enters namespaces of its own
(`openenv.isolation.namespaces`): its own PID, mount, IPC, network and user namespace, a private
/tmp and workspace, the folders it shares with other environments hidden, the sandbox user
(nobody when the trainer is root) and no capabilities. The trainer moves its processes into its
cgroup (memory, processes, CPU) before anyone can send it a request, so every process an episode
starts is counted and killed with it; the sandbox itself has no access to any cgroup. The
bubblewrap and namespace mechanics are `openenv.isolation`'s, shared with `openenv.sandbox`.

Importing an environment takes seconds, forking a warm fork server milliseconds: this is what
keeps a sandboxed start within a few hundred milliseconds.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import json
import os
import secrets
import select
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import Any, ClassVar, Optional

from openenv import settings
from openenv.isolation import cgroups
from openenv.isolation.bubblewrap import (
    SANDBOX_GID,
    SANDBOX_UID,
    BwrapMounts,
    bound_paths,
    bubblewrap_problem,
    root_userns,
)

from .base import EnvironmentStartError, ProviderUnavailableError, StartedEnv
from .local import ForkServer, LocalProcessProvider, runtime_dir
from .ownership import LocalRecord, Owner, process_start_time
from .spec import AppTarget, EnvSpec, resolve_app

#: The writable folder of each environment (a private tmpfs, like /tmp).
WORKSPACE = "/workspace"

#: Environment variables a sandboxed fork server gets from the trainer (besides OPENENV_*).
_ENV_ALLOW = (
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "PYTHONPATH",
    "PYTHONHASHSEED",
    "PYTHONWARNINGS",
)


def _read_info(fd: int, timeout: float = 10.0) -> dict[str, Any]:
    """bubblewrap's --info-fd report: {"child-pid": host pid of the sandbox's first process}."""
    data = b""
    deadline = time.monotonic() + timeout
    decoder = json.JSONDecoder()
    while time.monotonic() < deadline:
        with contextlib.suppress(ValueError):
            info, _ = decoder.raw_decode(data.decode())
            if isinstance(info, dict):
                return info
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            data += chunk
    raise EnvironmentStartError("sandbox: bubblewrap did not report its sandbox's pid")


class SandboxForkServer(ForkServer):
    """A fork server inside a bubblewrap sandbox, recorded so a dead trainer's is collected."""

    def __init__(
        self,
        python: str,
        root: Optional[Path],
        network: str,
        shared: Path,
        *,
        extra_ro: tuple[str, ...] = (),
    ) -> None:
        """`shared` holds the sockets and logs of this sandbox's environments: the only
        writable host folder the fork server sees (each environment hides it)."""
        self.network = network
        self.shared = shared
        as_root = os.geteuid() == 0
        ns_fd = root_userns() if as_root else None
        info_r, info_w = os.pipe()
        # The environment's folder is bound; the trainer's working folder is not.
        cwd = str(root) if root else WORKSPACE
        argv = ["bwrap"]
        argv += ["--userns", str(ns_fd)] if ns_fd is not None else ["--unshare-user"]
        argv += ["--unshare-ipc", "--unshare-pid", "--unshare-uts"]
        if network == "none":
            argv.append("--unshare-net")
        # Capabilities stay in the sandbox's own user namespace: the fork server needs them to
        # give each environment its namespaces; each environment drops all of them.
        argv += ["--new-session", "--cap-add", "ALL", "--hostname", "openenv"]
        argv += ["--info-fd", str(info_w)]
        mounts = BwrapMounts(argv)
        mounts.system()
        argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--dir", WORKSPACE]
        mounts.made.update(("/proc", "/dev", "/tmp", WORKSPACE))
        for path in bound_paths(python, root, extra_ro):
            mounts.bind("--ro-bind", path)
        mounts.bind("--bind", str(shared))
        argv += ["--remount-ro", "/", "--chdir", cwd, "--"]
        # Locks bubblewrap's mounts before the fork server imports anything (see lock_down).
        argv += [python, "-m", "openenv.isolation.namespaces"]
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "HOME": WORKSPACE,
            "TMPDIR": "/tmp",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
        }
        env.update({k: v for k, v in os.environ.items() if k in _ENV_ALLOW})
        env.update({k: v for k, v in os.environ.items() if k.startswith(settings.PREFIX)})
        fds = (info_w,) if ns_fd is None else (info_w, ns_fd)
        try:
            super().__init__(
                python, root, env, wrap=argv, pass_fds=fds, clear_env=True, log_dir=shared
            )
            os.close(info_w)
            info_w = -1
            self.sandbox_pid = int(_read_info(info_r)["child-pid"])
        except BaseException:
            if info_w >= 0:
                os.close(info_w)
            if hasattr(self, "process"):
                super().close(timeout=1.0)
            raise
        finally:
            os.close(info_r)
            if ns_fd is not None:
                os.close(ns_fd)
        self._zygote_pid: Optional[int] = None
        self.record = LocalRecord(
            id=f"sandbox-forkserver-{secrets.token_hex(4)}",
            provider=SandboxProvider.name,
            owner=Owner.current(),
            pid=self.sandbox_pid,
            pid_start=process_start_time(self.sandbox_pid),
            created_at=time.time(),
            cleanup_paths=[str(shared)],
            target=f"fork server ({network}) for {cwd}",
        )
        self.record.save()

    def zygote_pid(self) -> int:
        """Host pid of the fork server process (the sandbox's first process's only child)."""
        if self._zygote_pid is None:
            children = _children(self.sandbox_pid)
            if len(children) != 1:
                raise EnvironmentStartError("sandbox: cannot find the fork server in its sandbox")
            self._zygote_pid = children[0]
        return self._zygote_pid

    def host_pid(self, pid: int) -> int:
        """The host pid of the fork server's child `pid` (a pid in the sandbox's namespace)."""
        for child in _children(self.zygote_pid()):
            if _ns_pids(child)[-1:] == [pid]:
                return child
        raise EnvironmentStartError(f"sandbox: environment process {pid} is gone")

    def close(self, timeout: float = 5.0) -> None:
        super().close(timeout)
        # Closing stdin ended the fork server; bubblewrap's init ends the rest of the sandbox.
        from .ownership import kill_process_tree

        kill_process_tree(self.record.pid, self.record.pid_start)
        self.record.forget()


def _descendants(pid: int) -> list[int]:
    """Every process below `pid`, parents before their children."""
    found: list[int] = []
    queue = _children(pid)
    while queue:
        child = queue.pop(0)
        found.append(child)
        queue.extend(_children(child))
    return found


def _join(groups: list[str], pid: int) -> None:
    """Move `pid` into `groups`; ProcessLookupError when it has exited meanwhile."""
    try:
        cgroups.add_process(groups, pid)
    except OSError as exc:
        if exc.errno == errno.ESRCH:
            raise ProcessLookupError(pid) from None
        raise


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def _ns_pids(pid: int) -> list[int]:
    """A process's pid in each PID namespace from the reader's down (NSpid)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                return [int(p) for p in line.split()[1:]]
    return []


ServerKey = tuple[str, Optional[str], str, tuple[str, ...]]
_servers: dict[ServerKey, SandboxForkServer] = {}
_shared: dict[ServerKey, Path] = {}
_servers_lock = threading.Lock()


def server_key(
    python: str, root: Optional[Path], network: str, extra_ro: tuple[str, ...]
) -> ServerKey:
    return (python, str(root) if root else None, network, extra_ro)


def shared_folder(key: ServerKey) -> Path:
    """The host folder for the sockets and logs of the sandbox `key` (made on first use)."""
    with _servers_lock:
        folder = _shared.get(key)
        if folder is None:
            folder = runtime_dir() / f"sandbox-{os.getpid()}-{secrets.token_hex(4)}"
            folder.mkdir(mode=0o700)
            _shared[key] = folder
        return folder


def sandbox_fork_server(key: ServerKey) -> SandboxForkServer:
    python, root, network, extra_ro = key
    shared = shared_folder(key)
    with _servers_lock:
        server = _servers.get(key)
        if server is None or not server.alive():
            if server is not None:
                server.close(timeout=1.0)
            server = SandboxForkServer(
                python,
                Path(root) if root else None,
                network,
                shared,
                extra_ro=extra_ro,
            )
            _servers[key] = server
        return server


def close_fork_servers() -> None:
    """Stop every sandbox (and the environments in it) this process started."""
    with _servers_lock:
        servers = list(_servers.values())
        folders = list(_shared.values())
        _servers.clear()
        _shared.clear()
    for server in servers:
        server.close()
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


def _forget_in_child() -> None:
    for server in _servers.values():
        server.release_in_child()
    _servers.clear()
    _shared.clear()


atexit.register(close_fork_servers)
os.register_at_fork(after_in_child=_forget_in_child)


def resolve_root(spec: EnvSpec) -> Optional[Path]:
    return resolve_app(spec.target).root


class SandboxProvider(LocalProcessProvider):
    """Environments in bubblewrap sandboxes, each in namespaces of its own, forked warm.

    Network policy "none" (the default): the environment has loopback only and the trainer
    reaches it over a Unix socket. "egress": it shares the host's network and serves on a
    loopback port. `ro_binds` adds host folders the environment may read (data, models).
    """

    name: ClassVar[str] = "sandbox"
    default_network: ClassVar[str] = "none"

    def __init__(
        self,
        *,
        python: Optional[str] = None,
        use_cgroups: bool = True,
        ro_binds: tuple[str, ...] | list[str] = (),
        tmp_size: str = "256m",
    ) -> None:
        # Policy "none" serves on a Unix socket, "egress" on a loopback port.
        super().__init__(python=python, transport="tcp", use_cgroups=use_cgroups)
        self.ro_binds = tuple(os.path.abspath(p) for p in ro_binds)
        self.tmp_size = tmp_size

    @classmethod
    def check_available(cls) -> None:
        reason = bubblewrap_problem()
        if reason is not None:
            raise ProviderUnavailableError(reason)

    def _check_spec(self, spec: EnvSpec) -> None:
        return None

    async def _start(self, spec: EnvSpec) -> StartedEnv:
        network = spec.network or self.default_network
        env = await super()._start(spec.model_copy(update={"network": network}))
        env.info["isolation"] = f"bubblewrap + namespaces, network {network}"
        return env

    def _key(self, spec: EnvSpec, target: AppTarget) -> ServerKey:
        network = spec.network or self.default_network
        return server_key(self.python, target.root, network, self.ro_binds)

    def _fork_server(self, spec: EnvSpec, target: AppTarget) -> ForkServer:
        return sandbox_fork_server(self._key(spec, target))

    def _env_folder(self, spec: EnvSpec, target: AppTarget, env_id: str) -> Path:
        return shared_folder(self._key(spec, target)) / env_id

    def _adopt(self, server: ForkServer, pid: int, groups: Optional[list[str]]) -> int:
        """The environment's host pid; its processes are moved into its cgroups from here, the
        host, so the sandbox needs no access to any cgroup. This happens before the trainer
        hears of the environment: no request, so no episode code, has reached it yet."""
        assert isinstance(server, SandboxForkServer)
        host_pid = server.host_pid(pid)
        if groups:
            try:
                for member in [host_pid, *_descendants(host_pid)]:
                    with contextlib.suppress(ProcessLookupError):
                        _join(groups, member)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.killpg(host_pid, signal.SIGKILL)
                raise
        return host_pid

    def _spawn_request(
        self,
        spec: EnvSpec,
        target: AppTarget,
        folder: Path,
        socket_path: Optional[Path],
        groups: Optional[list[str]],
    ) -> dict[str, Any]:
        request = super()._spawn_request(spec, target, folder, socket_path, groups)
        if groups:
            # The host places the environment in its cgroups (`_adopt`); the fork server only
            # keeps the wall-time deadline and applies no per-process fallback.
            request["cgroups"] = None
            wall = spec.limits.wall_time_s
            request["limits"] = {"wall_time_s": wall} if wall else {}
        return request

    def _isolation(self, spec: EnvSpec, folder: Path) -> Optional[dict[str, Any]]:
        # Called with the spec alone; its folder is resolved again (cheap, cached imports).
        as_root = os.geteuid() == 0
        return {
            "network": spec.network or self.default_network,
            # The sockets and logs of the sandbox's environments.
            "hide": [str(folder.parent)],
            "uid": SANDBOX_UID if as_root else None,
            "gid": SANDBOX_GID if as_root else None,
            "workspace": WORKSPACE,
            "tmp_size": self.tmp_size,
            # A virtual environment under /tmp stays visible under the private /tmp.
            "keep_under_tmp": [
                path
                for path in bound_paths(self.python, resolve_root(spec), self.ro_binds)
                if path.startswith("/tmp/")
            ],
        }
