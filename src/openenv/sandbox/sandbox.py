"""Run untrusted commands (a model's code, shell commands, test suites) in a private workspace.

Two backends, chosen once per `Sandbox` (`OPENENV_SANDBOX=auto|bubblewrap|process`):

- **bubblewrap** (where `bwrap` can create namespaces): a new user, PID, IPC, UTS and network
  namespace (loopback only unless `network=True`); the system, the interpreter and its packages
  bound read-only; the workspace the only writable folder besides a private /tmp; no
  capabilities; the trainer's environment variables cleared. When the command ends, its PID
  namespace ends with it, so no background process survives.
- **process** (the fallback, e.g. inside a container that forbids user namespaces): a new session
  and process group in the workspace with a cleared environment and the same resource limits;
  no filesystem or network isolation of its own, so the container (or machine) around it is the
  boundary. `Sandbox.backend` and every `ExecResult.backend` say which one was in force.

Both: a cgroup per command where one is writable (memory and process ceilings for the whole tree,
and a kill that reaches every descendant), else per-process rlimits; the unprivileged user
(nobody) when the server runs as root; CPU, file-size and wall-clock limits; output capped.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import resource
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Optional, Union

from ..providers import cgroups
from ..providers.sandbox import _ETC, SANDBOX_GID, SANDBOX_UID, _root_userns, bound_paths
from ..providers.sandbox import _probe as _bubblewrap_problem
from ..providers.spec import ResourceLimits
from .limits import SandboxLimits
from .result import ExecResult, ExecStatus

#: Where the workspace appears inside a bubblewrap sandbox.
WORKSPACE = "/workspace"
BACKENDS = ("bubblewrap", "process")
_PATH = "/usr/local/bin:/usr/bin:/bin"
_log = logging.getLogger(__name__)


class SandboxUnavailableError(RuntimeError):
    """The backend asked for cannot run here (the message says what to install)."""


class WorkspacePathError(ValueError):
    """A path given for the workspace points outside it (`..`, an absolute path, a symlink)."""


def choose_backend(requested: Optional[str] = None) -> str:
    """The backend a new sandbox uses: `requested`, else OPENENV_SANDBOX, else bubblewrap when
    it works here and process otherwise."""
    wanted = (requested or os.environ.get("OPENENV_SANDBOX") or "auto").strip().lower()
    if wanted in ("bwrap", "bubblewrap"):
        problem = _bubblewrap_problem()
        if problem is not None:
            raise SandboxUnavailableError(problem)
        return "bubblewrap"
    if wanted == "process":
        return "process"
    if wanted != "auto":
        raise ValueError(f"unknown sandbox backend {wanted!r}; use auto, bubblewrap or process")
    return "bubblewrap" if _bubblewrap_problem() is None else "process"


def describe_backend(backend: str) -> str:
    """One line for logs, /health metadata and READMEs."""
    if backend == "bubblewrap":
        return "bubblewrap: own namespaces, read-only system, no network, private workspace"
    return (
        "process: own session, rlimits and cgroup when available; NO filesystem or network "
        "isolation (the container or machine around the server is the boundary)"
    )


def _count_tasks_of(uid: int) -> int:
    count = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if os.stat(entry.path).st_uid == uid:
                count += len(os.listdir(f"{entry.path}/task"))
    return count


class Sandbox:
    """A private workspace and the means to run commands in it.

    >>> with Sandbox() as box:
    ...     result = box.run(["python3", "-c", "print(6 * 7)"])
    ...     result.stdout
    '42\\n'
    """

    def __init__(
        self,
        workspace: Union[str, Path, None] = None,
        *,
        limits: Optional[SandboxLimits] = None,
        backend: Optional[str] = None,
        ro_binds: Sequence[Union[str, Path]] = (),
        env: Optional[Mapping[str, str]] = None,
    ) -> None:
        self.backend = choose_backend(backend)
        self.limits = limits or SandboxLimits()
        self.env = dict(env or {})
        self._owns_workspace = workspace is None
        if workspace is None:
            root = os.environ.get("OPENENV_SANDBOX_ROOT") or tempfile.gettempdir()
            workspace = tempfile.mkdtemp(prefix="openenv-ws-", dir=root)
        self.host_workspace = Path(workspace).resolve()
        self.host_workspace.mkdir(parents=True, exist_ok=True)
        self._give_to_sandbox_user(self.host_workspace)
        self._ro_binds = tuple(str(Path(p).resolve()) for p in ro_binds)
        # A root server's commands run as nobody: bubblewrap joins a user namespace that maps
        # root (to set up the mounts) and nobody only, and the command switches to nobody.
        self._as_root = os.geteuid() == 0
        self._userns_fd: Optional[int] = None
        if self.backend == "bubblewrap" and self._as_root:
            self._userns_fd = _root_userns()
        elif self.backend == "process" and self._as_root:
            _log.warning(
                "sandbox: the process backend runs commands as root with no filesystem "
                "isolation; install bubblewrap or run the server as an unprivileged user"
            )
        self._children: set[SandboxProcess] = set()
        self._lock = threading.Lock()
        self._closed = False

    # -- where things are --------------------------------------------------------------------

    @property
    def workspace(self) -> str:
        """The workspace's path as commands in this sandbox see it."""
        return WORKSPACE if self.backend == "bubblewrap" else str(self.host_workspace)

    @property
    def python(self) -> str:
        """An interpreter commands can run: this server's (its packages are bound read-only)."""
        return sys.executable

    def host_path(self, relative: Union[str, Path]) -> Path:
        """The host path of a workspace file, refusing any that leaves the workspace (by `..`,
        an absolute path or a symlink the command made)."""
        relative = Path(relative)
        if relative.is_absolute():
            prefix = Path(self.workspace)
            if prefix not in relative.parents and relative != prefix:
                raise WorkspacePathError(f"{str(relative)!r} is outside the workspace")
            relative = relative.relative_to(prefix)
        path = (self.host_workspace / relative).resolve()
        if path != self.host_workspace and self.host_workspace not in path.parents:
            raise WorkspacePathError(f"{str(relative)!r} is outside the workspace")
        return path

    def write_file(self, relative: Union[str, Path], content: Union[str, bytes]) -> Path:
        path = self.host_path(relative)
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in reversed(path.relative_to(self.host_workspace).parents):
            self._give_to_sandbox_user(self.host_workspace / parent)
        if path.is_symlink():
            path.unlink()
        data = content.encode() if isinstance(content, str) else content
        path.write_bytes(data)
        self._give_to_sandbox_user(path)
        return path

    def read_file(self, relative: Union[str, Path], max_bytes: int = 10_000_000) -> bytes:
        path = self.host_path(relative)
        with path.open("rb") as handle:
            return handle.read(max_bytes)

    def clear_workspace(self, *, keep: Sequence[SandboxProcess] = ()) -> None:
        """Delete everything in the workspace (a new episode), killing what still runs there
        except the processes in `keep` (e.g. a warm interpreter that has run nothing yet)."""
        self._kill_children(keep=keep)
        for entry in list(self.host_workspace.iterdir()):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    entry.unlink()

    def _give_to_sandbox_user(self, path: Path) -> None:
        if os.geteuid() == 0 and self.backend == "bubblewrap":
            with contextlib.suppress(OSError):
                os.chown(path, SANDBOX_UID, SANDBOX_GID, follow_symlinks=False)

    # -- running -----------------------------------------------------------------------------

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: Union[str, bytes, None] = None,
        limits: Optional[SandboxLimits] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
    ) -> ExecResult:
        """Run one command to its end (or its limits) and say how it went. Never raises for
        what the command does; a sandbox that cannot start is `ExecStatus.SANDBOX_ERROR`."""
        limits = limits or self.limits
        started = time.monotonic()
        try:
            process, groups = self._popen(argv, limits, env, cwd, stdin_pipe=stdin is not None)
        except (OSError, subprocess.SubprocessError) as exc:
            return ExecResult(
                status=ExecStatus.SANDBOX_ERROR,
                backend=self.backend,
                message=f"could not start the command: {exc}",
            )
        try:
            if stdin is not None:
                data = stdin.encode() if isinstance(stdin, str) else stdin
                threading.Thread(target=_feed, args=(process.stdin, data), daemon=True).start()
            out, err, truncated, timed_out = _collect(process, limits, started)
            returncode = process.wait()
            events = _cgroup_events(groups)
        finally:
            _kill(process, groups)
        duration = time.monotonic() - started
        return self._result(
            returncode, out, err, truncated, timed_out, events, duration, limits.max_output_bytes
        )

    def spawn(
        self,
        argv: Sequence[str],
        *,
        limits: Optional[SandboxLimits] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
    ) -> SandboxProcess:
        """Start a long-lived process (an interpreter, a kernel) with stdin/stdout/stderr pipes.
        Its wall-clock limit is the caller's to enforce, per request; `close()` kills it."""
        limits = limits or self.limits
        process, groups = self._popen(argv, limits, env, cwd, stdin_pipe=True)
        child = SandboxProcess(self, process, groups)
        with self._lock:
            self._children.add(child)
        return child

    def _popen(
        self,
        argv: Sequence[str],
        limits: SandboxLimits,
        env: Optional[Mapping[str, str]],
        cwd: Optional[str],
        *,
        stdin_pipe: bool,
    ) -> tuple[subprocess.Popen[bytes], list[str]]:
        if self._closed:
            raise OSError("the sandbox is closed")
        if not argv:
            raise OSError("no command given")
        full_env = {
            "PATH": _PATH,
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "HOME": self.workspace,
            "TMPDIR": "/tmp" if self.backend == "bubblewrap" else str(self.host_workspace),
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
            **self.env,
            **(env or {}),
        }
        workdir = self.workspace if cwd is None else str(Path(self.workspace, cwd))
        if self.backend == "bubblewrap":
            command = [*self._bwrap_argv(limits, workdir), *argv]
            host_cwd = str(self.host_workspace)
        else:
            command = list(argv)
            host_cwd = str(self.host_path(cwd or "."))
        groups = cgroups.create(
            f"sandbox-{secrets.token_hex(6)}",
            ResourceLimits(memory_mb=limits.memory_mb, pids=limits.max_processes),
        )
        nproc = None
        if groups is None and limits.max_processes is not None and not self._as_root:
            nproc = _count_tasks_of(os.getuid()) + limits.max_processes

        def prepare() -> None:  # runs in the child, between fork and exec
            if groups:
                cgroups.add_process(groups)
            _set_rlimits(limits, per_process_memory=not groups, nproc=nproc)

        try:
            process = subprocess.Popen(
                command,
                stdin=subprocess.PIPE if stdin_pipe else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=host_cwd,
                env=full_env,
                start_new_session=True,
                preexec_fn=prepare,
                close_fds=True,
                pass_fds=() if self._userns_fd is None else (self._userns_fd,),
            )
        except BaseException:
            for group in groups or []:
                cgroups.kill_and_remove(group)
            raise
        return process, groups or []

    def _bwrap_argv(self, limits: SandboxLimits, workdir: str) -> list[str]:
        argv = ["bwrap"]
        if self._userns_fd is not None:
            argv += ["--userns", str(self._userns_fd)]
        else:
            argv.append("--unshare-user")
        argv += ["--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"]
        if not limits.network:
            argv.append("--unshare-net")
        argv += ["--die-with-parent", "--new-session", "--hostname", "sandbox"]
        if self._userns_fd is not None:
            # Only to switch to nobody (below); the command itself keeps no capability.
            for cap in ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP"):
                argv += ["--cap-add", cap]
        else:
            argv += ["--cap-drop", "ALL"]
        made: set[str] = {"/"}

        def bind(option: str, source: str, target: Optional[str] = None) -> None:
            target = target or source
            parent = os.path.dirname(target)
            missing = []
            while parent not in made:
                missing.append(parent)
                parent = os.path.dirname(parent)
            for folder in reversed(missing):
                argv.extend(["--perms", "0755", "--dir", folder])
                made.add(folder)
            argv.extend([option, source, target])
            made.add(target)

        bind("--ro-bind", "/usr")
        for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
            if os.path.islink(top):
                argv += ["--symlink", os.readlink(top), top]
            elif os.path.isdir(top):
                bind("--ro-bind", top)
        for name in _ETC:
            bind("--ro-bind-try", f"/etc/{name}")
        argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
        made.update(("/proc", "/dev", "/tmp"))
        for path in bound_paths(sys.executable, None, self._ro_binds):
            if path != str(self.host_workspace):
                bind("--ro-bind", path)
        bind("--bind", str(self.host_workspace), WORKSPACE)
        argv += ["--remount-ro", "/", "--chdir", workdir, "--"]
        if self._userns_fd is not None:
            argv += [
                "setpriv",
                f"--reuid={SANDBOX_UID}",
                f"--regid={SANDBOX_GID}",
                "--clear-groups",
                "--inh-caps=-all",
                "--bounding-set=-all",
                "--no-new-privs",
                "--",
            ]
        return argv

    def _result(
        self,
        returncode: int,
        out: bytes,
        err: bytes,
        truncated: bool,
        timed_out: bool,
        events: dict[str, int],
        duration: float,
        max_output: int,
    ) -> ExecResult:
        exit_code: Optional[int] = returncode if returncode >= 0 else None
        sig: Optional[int] = -returncode if returncode < 0 else None
        if self.backend == "bubblewrap" and returncode > 128 and returncode - 128 < 65:
            # bubblewrap reports a command killed by signal N as exit status 128 + N.
            sig, exit_code = returncode - 128, None
        stdout = out.decode("utf-8", "replace")
        stderr = err.decode("utf-8", "replace")
        tail = stderr[-2000:]
        status, message = ExecStatus.OK, ""
        if timed_out:
            status = ExecStatus.TIMEOUT
            message = "the wall-clock limit ran out; every process killed"
        elif truncated:
            status = ExecStatus.OUTPUT_LIMIT
            message = f"printed more than {max_output} bytes; killed"
        elif events.get("oom_kill") or "MemoryError" in tail or _MEMORY_RE.search(tail):
            status, message = ExecStatus.MEMORY_LIMIT, "ran out of its memory limit"
        elif sig == signal.SIGXCPU:
            status, message = ExecStatus.CPU_LIMIT, "used up its CPU time"
        elif sig == signal.SIGXFSZ or "File too large" in tail:
            status, message = ExecStatus.FILE_LIMIT, "wrote a file larger than its limit"
        elif events.get("pids_max") or _FORK_RE.search(tail):
            status, message = ExecStatus.PROCESS_LIMIT, "hit its process limit"
        elif sig is not None:
            status, message = ExecStatus.KILLED, f"killed by signal {sig}"
        elif exit_code:
            status = ExecStatus.ERROR
        if status is ExecStatus.PROCESS_LIMIT and exit_code == 0:
            status = ExecStatus.OK  # a refused fork it recovered from is not a failure
        return ExecResult(
            status=status,
            exit_code=exit_code,
            signal=sig,
            stdout=stdout,
            stderr=stderr,
            truncated=truncated,
            duration_s=round(duration, 6),
            backend=self.backend,
            message=message,
        )

    # -- cleanup -----------------------------------------------------------------------------

    def _kill_children(self, keep: Sequence[SandboxProcess] = ()) -> None:
        with self._lock:
            children = [child for child in self._children if child not in keep]
            self._children.difference_update(children)
        for child in children:
            child.kill()

    def close(self) -> None:
        """Kill everything still running and delete the workspace (if this sandbox made it)."""
        if self._closed:
            return
        self._closed = True
        self._kill_children()
        if self._owns_workspace:
            shutil.rmtree(self.host_workspace, ignore_errors=True)
        if self._userns_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._userns_fd)
            self._userns_fd = None

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


class SandboxProcess:
    """A long-lived process in a sandbox (see `Sandbox.spawn`)."""

    def __init__(
        self, sandbox: Sandbox, process: subprocess.Popen[bytes], groups: list[str]
    ) -> None:
        self.sandbox = sandbox
        self.process = process
        self._groups = groups

    @property
    def stdin(self) -> IO[bytes]:
        assert self.process.stdin is not None
        return self.process.stdin

    @property
    def stdout(self) -> IO[bytes]:
        assert self.process.stdout is not None
        return self.process.stdout

    @property
    def stderr(self) -> IO[bytes]:
        assert self.process.stderr is not None
        return self.process.stderr

    def alive(self) -> bool:
        return self.process.poll() is None

    def ended(
        self, *, stderr: bytes = b"", duration_s: float = 0.0, timed_out: bool = False
    ) -> ExecResult:
        """Why the process ended, classified like `Sandbox.run` (memory, CPU, file, process
        limits, a signal), then kill what is left. A process still running after `timed_out`
        is killed and reported as a timeout; otherwise this waits for its exit."""
        if timed_out:
            self._signal()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)
        events = _cgroup_events(self._groups)
        returncode = self.process.poll()
        self._forget()
        _kill(self.process, self._groups)  # what it left behind, as `run` does after a wait
        return self.sandbox._result(
            -signal.SIGKILL if returncode is None else returncode,
            b"",
            stderr,
            False,
            timed_out,
            events,
            duration_s,
            self.sandbox.limits.max_output_bytes,
        )

    def kill(self, *, wait: bool = True) -> None:
        """SIGKILL the process and everything it started. With `wait=False`, only the signals
        are sent here; reaping it and removing its cgroup happen on a background thread, so a
        caller on a latency path (a reset) does not wait for a loaded machine to tear the
        processes down."""
        self._forget()
        self._signal()
        if wait:
            _kill(self.process, self._groups, signal_group=False)
        else:
            args = (self.process, self._groups)
            threading.Thread(
                target=_kill, args=args, kwargs={"signal_group": False}, daemon=True
            ).start()

    def _signal(self) -> None:
        # Its process group only while its pid is its own: once reaped (`alive()` reaps), the
        # pid may already belong to another command's group.
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
        for group in self._groups:
            for pid in cgroups.pids(group):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)

    def _forget(self) -> None:
        with self.sandbox._lock:
            self.sandbox._children.discard(self)


_MEMORY_RE = re.compile(r"Cannot allocate memory|std::bad_alloc|out of memory", re.IGNORECASE)
_FORK_RE = re.compile(r"fork: (retry: )?Resource temporarily unavailable|BlockingIOError")


def _set_rlimits(limits: SandboxLimits, *, per_process_memory: bool, nproc: Optional[int]) -> None:
    if limits.cpu_time_s is not None:
        seconds = max(1, int(limits.cpu_time_s + 0.999))
        resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 1))
    if limits.max_file_mb is not None:
        size = limits.max_file_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    if per_process_memory and limits.memory_mb is not None:
        size = limits.memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (size, size))
    if nproc is not None:
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _feed(pipe: Optional[IO[bytes]], data: bytes) -> None:
    if pipe is None:
        return
    with contextlib.suppress(OSError, ValueError):
        pipe.write(data)
    with contextlib.suppress(OSError, ValueError):
        pipe.close()


def _collect(
    process: subprocess.Popen[bytes], limits: SandboxLimits, started: float
) -> tuple[bytes, bytes, bool, bool]:
    """Read stdout and stderr until both close, the wall clock runs out or the output cap is
    passed. Returns (stdout, stderr, truncated, timed_out)."""
    deadline = started + limits.wall_time_s
    cap = limits.max_output_bytes
    chunks: dict[int, list[bytes]] = {1: [], 2: []}
    total = 0
    truncated = timed_out = False
    exited_at: Optional[float] = None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ, 1)  # type: ignore[arg-type]
        selector.register(process.stderr, selectors.EVENT_READ, 2)  # type: ignore[arg-type]
        while selector.get_map():
            now = time.monotonic()
            if now >= deadline:
                timed_out = True
                break
            if exited_at is None and process.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > 0.5:
                break  # a background process holds the pipes open; it is killed below
            for key, _ in selector.select(timeout=min(0.1, deadline - now)):
                data = os.read(key.fd, 65536)
                if not data:
                    selector.unregister(key.fileobj)
                    continue
                room = cap - total
                chunks[key.data].append(data[:room])
                total += min(len(data), room)
                if len(data) > room:
                    truncated = True
            if truncated:
                break
    if timed_out or truncated:
        _kill(process, [])
    return b"".join(chunks[1]), b"".join(chunks[2]), truncated, timed_out


def _cgroup_events(groups: list[str]) -> dict[str, int]:
    """oom_kill and pids_max counts from the command's cgroups (v1 and v2 files)."""
    found: dict[str, int] = {}
    for group in groups:
        for name, key, field in (
            ("memory.events", "oom_kill", "oom_kill"),
            ("memory.oom_control", "oom_kill", "oom_kill"),
            ("pids.events", "pids_max", "max"),
        ):
            with contextlib.suppress(OSError, ValueError):
                for line in Path(group, name).read_text().splitlines():
                    parts = line.split()
                    if len(parts) == 2 and parts[0] == field:
                        found[key] = found.get(key, 0) + int(parts[1])
    return found


def _kill(process: subprocess.Popen[Any], groups: list[str], *, signal_group: bool = True) -> None:
    """SIGKILL the command's process group and every process in its cgroups; reap it."""
    if signal_group:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
    for group in groups:
        cgroups.kill_and_remove(group)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=5)
    for pipe in (process.stdin, process.stdout, process.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
