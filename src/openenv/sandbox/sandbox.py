"""Run untrusted commands (a model's code, shell commands, test suites) in a private workspace.

Two backends, chosen once per `Sandbox` (`OPENENV_SANDBOX=auto|bubblewrap|process`):

- **bubblewrap** (where `bwrap` can create namespaces): a new user, PID, IPC, UTS and network
  namespace (loopback only unless `network=True`); the system, the interpreter and its packages
  bound read-only; the workspace the only writable folder besides a private /tmp; no
  capabilities; the trainer's environment variables cleared; a root server's commands run as
  nobody. When the command ends, its PID namespace ends with it, so no background process
  survives.
- **process** (the fallback, e.g. inside a container that forbids user namespaces): a new session
  and process group in the workspace with a cleared environment and the same resource limits;
  no filesystem or network isolation of its own, so the container (or machine) around it is the
  boundary. `Sandbox.backend` and every `ExecResult.backend` say which one was in force.

Both: a cgroup per command where one is writable (memory and process ceilings for the whole tree,
and a kill that reaches every descendant), else per-process rlimits; CPU, file-size and
wall-clock limits; output capped. docs/sandbox.md says what each guarantees and what it does not.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import math
import os
import re
import resource
import secrets
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Optional, Union

from openenv import settings

from ..isolation import cgroups
from ..isolation.bubblewrap import (
    SANDBOX_GID,
    SANDBOX_UID,
    BwrapMounts,
    bound_paths,
    bubblewrap_problem,
    root_userns,
)
from ..isolation.limits import ResourceLimits
from ..isolation.spawn import spawn as on_spawner_thread
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
    wanted = (requested or settings.SANDBOX.get() or "auto").strip().lower()
    if wanted in ("bwrap", "bubblewrap"):
        problem = bubblewrap_problem()
        if problem is not None:
            raise SandboxUnavailableError(problem)
        return "bubblewrap"
    if wanted == "process":
        return "process"
    if wanted != "auto":
        raise ValueError(f"unknown sandbox backend {wanted!r}; use auto, bubblewrap or process")
    return "bubblewrap" if bubblewrap_problem() is None else "process"


@functools.cache
def process_count_bounded() -> bool:
    """Whether a command's process count has a ceiling here: a cgroup with the pids controller,
    or RLIMIT_NPROC (which does not bind root). Without one, a fork bomb reaches the host."""
    if os.geteuid() != 0:
        return True
    groups = cgroups.create(f"sandbox-probe-{secrets.token_hex(4)}", ResourceLimits(pids=8))
    try:
        return "pids" in _controllers(groups)
    finally:
        for group in groups or []:
            cgroups.kill_and_remove(group)


def describe_backend(backend: str) -> str:
    """One line for logs, /health metadata and READMEs: the isolation, and whether limits
    hold for a command's whole process tree (a cgroup) or per process (rlimits)."""
    if cgroups.mode() is not None:
        limits = f"cgroup {cgroups.mode()} limits for the whole process tree"
    else:
        limits = "per-process rlimits only (no writable cgroup)"
    if backend == "bubblewrap":
        return (
            "bubblewrap: own namespaces, read-only system, no network, private workspace; " + limits
        )
    return (
        "process: own session and "
        + limits
        + "; NO filesystem or network isolation (the container or machine around the server "
        "is the boundary)"
    )


def _count_tasks_of(uid: int) -> int:
    """Threads of every process whose real uid is `uid`: what RLIMIT_NPROC counts. Read from
    /proc/<pid>/status, not the folder's owner, which is root for a non-dumpable process."""
    count = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as handle:
                status = handle.read()
        except OSError:
            continue
        real_uid = threads = None
        for line in status.splitlines():
            if line.startswith(b"Uid:"):
                real_uid = int(line.split()[1])
            elif line.startswith(b"Threads:"):
                threads = int(line.split()[1])
        if real_uid == uid and threads:
            count += threads
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
        hidden: Sequence[Union[str, Path]] = (),
        env: Optional[Mapping[str, str]] = None,
    ) -> None:
        """`hidden`: host folders or files that commands must not read even though they lie
        inside a bound one (an environment's answer keys inside its installed package): under
        bubblewrap each appears empty; the process backend cannot hide anything."""
        self.backend = choose_backend(backend)
        self.limits = limits or SandboxLimits()
        self.env = dict(env or {})
        self._owns_workspace = workspace is None
        if workspace is None:
            root = settings.SANDBOX_ROOT.get() or tempfile.gettempdir()
            workspace = tempfile.mkdtemp(prefix="openenv-ws-", dir=root)
        self.host_workspace = Path(workspace).resolve()
        self.host_workspace.mkdir(parents=True, exist_ok=True)
        self.give_to_sandbox_user(self.host_workspace)
        self._ro_binds = tuple(str(Path(p).resolve()) for p in ro_binds)
        self._hidden = tuple(str(Path(p).resolve()) for p in hidden)
        # A root server's commands run as nobody: bubblewrap joins a user namespace that maps
        # root (to set up the mounts) and nobody only, and the command switches to nobody.
        self._as_root = os.geteuid() == 0
        self._userns_fd: Optional[int] = None
        if self.backend == "bubblewrap" and self._as_root:
            self._userns_fd = root_userns()
        elif self.backend == "process" and self._as_root:
            _log.warning(
                "sandbox: the process backend runs commands as root with no filesystem "
                "isolation; install bubblewrap or run the server as an unprivileged user"
            )
        self._children: set[SandboxProcess] = set()
        self._running: set[_Launch] = set()
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
        """Write a workspace file (making its folders). Walks the path without following
        symlinks, so a command that swaps a folder for a symlink meanwhile cannot redirect it."""
        path = self.host_path(relative)
        data = content.encode() if isinstance(content, str) else content
        fd = self._open_beneath(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, make_parents=True)
        with os.fdopen(fd, "wb") as handle:
            self.give_to_sandbox_user(handle.fileno())
            handle.write(data)
        return path

    def read_file(self, relative: Union[str, Path], max_bytes: int = 10_000_000) -> bytes:
        """The first `max_bytes` of a regular workspace file (symlinks out of the workspace,
        FIFOs and devices refused: WorkspacePathError)."""
        fd = self._open_beneath(self.host_path(relative), os.O_RDONLY)
        with os.fdopen(fd, "rb") as handle:
            return handle.read(max_bytes)

    def _open_beneath(self, path: Path, flags: int, *, make_parents: bool = False) -> int:
        """Open `path` (inside the workspace) one component at a time with O_NOFOLLOW, and
        only if it is a regular file: a FIFO would block the server's thread."""
        relative = path.relative_to(self.host_workspace)
        parts = relative.parts
        if not parts:
            raise WorkspacePathError("the workspace itself is not a file")
        directory = os.open(self.host_workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for name in parts[:-1]:
                if make_parents:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, 0o755, dir_fd=directory)
                try:
                    inner = os.open(
                        name,
                        os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                        dir_fd=directory,
                    )
                except OSError as exc:
                    raise WorkspacePathError(f"{str(relative)!r}: {exc.strerror}") from exc
                os.close(directory)
                directory = inner
                if make_parents:
                    self.give_to_sandbox_user(directory)
            flags |= os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            try:
                fd = os.open(parts[-1], flags, 0o644, dir_fd=directory)
            except OSError as exc:
                if exc.errno in (errno.ENOENT, errno.EISDIR) and not flags & os.O_CREAT:
                    raise
                raise WorkspacePathError(f"{str(relative)!r}: {exc.strerror}") from exc
        finally:
            os.close(directory)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise WorkspacePathError(f"{str(relative)!r} is not a regular file")
        os.set_blocking(fd, True)
        return fd

    def clear_workspace(
        self, *, kill_processes: bool = True, keep: Sequence[SandboxProcess] = ()
    ) -> None:
        """Delete everything in the workspace (a new episode), killing what still runs there
        except the spawned processes in `keep` (a warm interpreter that has run nothing yet),
        or nothing at all when `kill_processes` is False (a kernel kept across episodes)."""
        if kill_processes:
            self._kill_children(keep=keep)
        for entry in list(self.host_workspace.iterdir()):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    entry.unlink()

    def give_to_sandbox_user(self, path: Union[str, Path, int]) -> None:
        """Make a host path (or an open fd) one the sandbox's commands may write: they run as
        nobody when the server is root under bubblewrap; otherwise there is nothing to do."""
        if os.geteuid() == 0 and self.backend == "bubblewrap":
            with contextlib.suppress(OSError):
                if isinstance(path, int):
                    os.fchown(path, SANDBOX_UID, SANDBOX_GID)
                else:
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
        what the command does; a sandbox that cannot start is `ExecStatus.SANDBOX_ERROR`.
        Safe to call from many threads at once."""
        limits = limits or self.limits
        started = time.monotonic()
        try:
            launch = self._popen(argv, limits, env, cwd, stdin_pipe=stdin is not None, marker=True)
        except OSError as exc:
            return self._not_started(argv, exc)
        except subprocess.SubprocessError as exc:
            return self._sandbox_error(f"could not start the command: {exc}")
        process = launch.process
        with self._lock:
            self._running.add(launch)
            closed_meanwhile = self._closed
        if closed_meanwhile:  # close() ran while this command was starting: it missed it
            launch.killed_by_close = True
            launch.kill()
        try:
            data = stdin.encode() if isinstance(stdin, str) else stdin
            out, err, truncated, timed_out = _collect(process, limits, started, data)
            events = _cgroup_events(launch.groups)
        finally:
            launch.kill()
            status = launch.reap()
            with self._lock:
                self._running.discard(launch)
        duration = time.monotonic() - started
        started_command = launch.command_started()
        if not started_command and not launch.killed_by_close:
            # bubblewrap (or setpriv) failed before the command ran: the sandbox's failure. Only
            # a byte written before the command started counts, so no output can fake this.
            reason = (err.decode("utf-8", "replace").strip().splitlines() or ["no output"])[-1]
            return self._sandbox_error(f"bubblewrap could not start the command: {reason}")
        return _classify(
            backend=self.backend,
            returncode=os.waitstatus_to_exitcode(status),
            out=out,
            err=err,
            truncated=truncated,
            timed_out=timed_out,
            closed=launch.killed_by_close,
            events=events,
            limits=limits,
            cgroup_controllers=launch.controllers,
            duration=duration,
        )

    def spawn(
        self,
        argv: Sequence[str],
        *,
        limits: Optional[SandboxLimits] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        binds: Sequence[Union[str, Path]] = (),
    ) -> SandboxProcess:
        """Start a long-lived process (an interpreter, a kernel) with stdin/stdout/stderr pipes.
        Its wall-clock limit is the caller's to enforce, per request; `close()` kills it.
        Raises OSError (or subprocess.SubprocessError) when it cannot start.

        `binds`: host folders the process may also write, at the same path inside (e.g. for
        the IPC sockets a kernel shares with the server). Unlike the workspace, they can live
        outside anything the model may rename, and the caller can take write access back.

        Forked on one long-lived thread: bubblewrap's --die-with-parent follows the *thread*
        that forked it, and a server's worker thread (or a helper thread) may end first."""
        limits = limits or self.limits
        folders = [str(Path(b).resolve()) for b in binds]
        launch = on_spawner_thread(
            lambda: self._popen(
                argv, limits, env, cwd, stdin_pipe=True, marker=False, binds=folders
            )
        )
        child = SandboxProcess(self, launch)
        with self._lock:
            self._children.add(child)
            closed_meanwhile = self._closed
        if closed_meanwhile:  # close() ran while it was starting
            child.kill()
            raise OSError("the sandbox is closed")
        return child

    def _sandbox_error(self, message: str) -> ExecResult:
        return ExecResult(status=ExecStatus.SANDBOX_ERROR, backend=self.backend, message=message)

    def _not_started(self, argv: Sequence[str], exc: OSError) -> ExecResult:
        """A command that cannot be executed (not found, not executable, arguments too long)
        is the command's failure, reported with a shell's exit codes; anything else is ours."""
        program = argv[0] if argv else ""
        if exc.errno == errno.E2BIG:
            code, why = 126, "argument list too long"
        elif exc.errno in (errno.ENOENT, errno.EACCES, errno.ENOEXEC) and (
            exc.filename in (program, None) and self.backend == "process"
        ):
            code = 127 if exc.errno == errno.ENOENT else 126
            why = os.strerror(exc.errno or 0)
        else:
            return self._sandbox_error(f"could not start the command: {exc}")
        return ExecResult(
            status=ExecStatus.ERROR,
            exit_code=code,
            stderr=f"{program[:200]}: {why}\n",
            backend=self.backend,
            message=f"could not execute the command: {why}",
        )

    def _popen(
        self,
        argv: Sequence[str],
        limits: SandboxLimits,
        env: Optional[Mapping[str, str]],
        cwd: Optional[str],
        *,
        stdin_pipe: bool,
        marker: bool,
        binds: Sequence[str] = (),
    ) -> _Launch:
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
        host_cwd = self.host_path(cwd or ".")  # refuses a cwd outside the workspace
        relative_cwd = host_cwd.relative_to(self.host_workspace)
        marker_r = marker_w = -1
        if self.backend == "bubblewrap" and marker:
            marker_r, marker_w = os.pipe()
        try:
            if self.backend == "bubblewrap":
                workdir = str(Path(WORKSPACE, relative_cwd))
                command = [
                    *self._bwrap_argv(limits, workdir, binds),
                    *self._inner_argv(argv, marker_w),
                ]
                popen_cwd = str(self.host_workspace)
            else:
                command = list(argv)
                popen_cwd = str(host_cwd)
            pass_fds = tuple(fd for fd in (self._userns_fd, marker_w) if fd is not None and fd >= 0)
            groups = cgroups.create(
                f"sandbox-{secrets.token_hex(6)}",
                ResourceLimits(memory_mb=limits.memory_mb, pids=limits.max_processes),
            )
            controllers = _controllers(groups)
            sweep = None
            if self.backend == "process" and "pids" not in controllers:
                # No cgroup holds the tree: mark the command's environment so that processes
                # that left its process group (setsid, daemons) can still be found and killed.
                sweep = f"{_SWEEP_VARIABLE}={secrets.token_hex(12)}".encode()
                full_env[_SWEEP_VARIABLE] = sweep.split(b"=", 1)[1].decode()
            nproc = None
            if "pids" not in controllers and limits.max_processes is not None and not self._as_root:
                nproc = _count_tasks_of(os.getuid()) + limits.max_processes
            prepare = _Prepare(
                limits,
                cgroup_procs=[os.fsencode(os.path.join(g, "cgroup.procs")) for g in groups or ()],
                per_process_memory="memory" not in controllers,
                nproc=nproc,
            )
            try:
                process = subprocess.Popen(
                    command,
                    stdin=subprocess.PIPE if stdin_pipe else subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    cwd=popen_cwd,
                    env=full_env,
                    start_new_session=True,
                    preexec_fn=prepare,
                    close_fds=True,
                    pass_fds=pass_fds,
                )
            except BaseException:
                for group in groups or []:
                    cgroups.kill_and_remove(group)
                raise
        except BaseException:
            if marker_r >= 0:
                os.close(marker_r)
            raise
        finally:
            if marker_w >= 0:
                os.close(marker_w)
        return _Launch(process, groups or [], controllers, marker_r, sweep)

    def _bwrap_argv(
        self, limits: SandboxLimits, workdir: str, binds: Sequence[str] = ()
    ) -> list[str]:
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
        mounts = BwrapMounts(argv)
        mounts.system()
        # A private /tmp anyone may write to (the command may run as nobody).
        argv += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/tmp"]
        mounts.made.update(("/proc", "/dev", "/tmp"))
        for path in bound_paths(sys.executable, None, self._ro_binds):
            if path != str(self.host_workspace):
                mounts.bind("--ro-bind", path)
        mounts.bind("--bind", str(self.host_workspace), WORKSPACE)
        for hidden in self._hidden:
            if os.path.isdir(hidden):
                argv += ["--tmpfs", hidden, "--remount-ro", hidden]
            elif os.path.isfile(hidden):
                argv += ["--ro-bind", "/dev/null", hidden]
        for path in binds:
            mounts.bind("--bind", path)
        argv += ["--remount-ro", "/", "--chdir", workdir, "--"]
        return argv

    def _inner_argv(self, argv: Sequence[str], marker_fd: int) -> list[str]:
        """What bubblewrap runs: (as root: setpriv to nobody), then a shell that reports "the
        command is starting" on the marker pipe, closes our descriptors and execs the command."""
        inner: list[str] = []
        if self._userns_fd is not None:
            inner += [
                "setpriv",
                f"--reuid={SANDBOX_UID}",
                f"--regid={SANDBOX_GID}",
                "--clear-groups",
                "--inh-caps=-all",
                "--bounding-set=-all",
                "--no-new-privs",
                "--",
            ]
        script = []
        if marker_fd >= 0:
            script.append(f"printf . >&{marker_fd} && exec {marker_fd}>&- || exit 125")
        if self._userns_fd is not None:
            script.append(f"exec {self._userns_fd}<&-")
        if not script:
            return [*inner, *argv]
        script.append('exec -- "$@"')
        return [
            *inner,
            "/bin/bash",
            "--norc",
            "--noprofile",
            "-c",
            "; ".join(script),
            "sandbox",
            *argv,
        ]

    # -- cleanup -----------------------------------------------------------------------------

    def _kill_children(self, keep: Sequence[SandboxProcess] = ()) -> None:
        """Kill spawned processes (but those in `keep`) and the commands `run()` waits on in
        other threads (those threads reap them and report KILLED)."""
        with self._lock:
            children = [child for child in self._children if child not in keep]
            self._children.difference_update(children)
            running = list(self._running)
        for launch in running:
            launch.killed_by_close = True
            launch.kill()
        for child in children:
            child.kill()

    def close(self) -> None:
        """Kill everything still running and delete the workspace (if this sandbox made it)."""
        with self._lock:
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
        try:
            self.close()
        except Exception:  # at interpreter exit, modules may be half torn down
            pass


class _Launch:
    """One started command: its process, its cgroups and (bubblewrap) the marker pipe."""

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        groups: list[str],
        controllers: frozenset[str],
        marker_fd: int,
        sweep: Optional[bytes] = None,
    ) -> None:
        self.process = process
        self.sweep = sweep
        self.groups = groups
        self.controllers = controllers
        self.marker_fd = marker_fd
        self.killed_by_close = False
        self.reaped = False
        self._lock = threading.Lock()

    def exited(self) -> bool:
        """Whether the first process ended, without reaping it: its pid stays reserved, so
        killing its process group can never hit a recycled pid."""
        return self.reaped or _exited(self.process)

    def kill(self) -> None:
        """SIGKILL the process group and every process in the cgroups (setsid escapers
        included); safe from any thread, any number of times."""
        with self._lock:
            if not self.reaped:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.process.pid, signal.SIGKILL)
            groups, self.groups = self.groups, []
        for group in groups:
            cgroups.kill_and_remove(group)
        if self.sweep is not None:
            _kill_marked(self.sweep)

    def reap(self) -> int:
        """Wait for the (killed) first process; its wait status."""
        with self._lock:
            _, status = os.waitpid(self.process.pid, 0)
            self.reaped = True
            self.process.returncode = os.waitstatus_to_exitcode(status)
        for pipe in (self.process.stdin, self.process.stdout, self.process.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        return status

    def command_started(self) -> bool:
        """Whether the shell inside bubblewrap reported the command starting (read once)."""
        if self.marker_fd < 0:
            return True
        try:
            os.set_blocking(self.marker_fd, False)
            return os.read(self.marker_fd, 1) == b"."
        except OSError:
            return False
        finally:
            os.close(self.marker_fd)
            self.marker_fd = -1


class SandboxProcess:
    """A long-lived process in a sandbox (see `Sandbox.spawn`)."""

    def __init__(self, sandbox: Sandbox, launch: _Launch) -> None:
        self.sandbox = sandbox
        self._launch = launch
        self.process = launch.process

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
        return not self._launch.exited()

    @property
    def returncode(self) -> Optional[int]:
        """As `Popen.returncode` (negative: a signal), once it has ended; None while it runs.
        Read without reaping, so its pid stays reserved until `kill()`."""
        if self.process.returncode is not None:
            return self.process.returncode
        try:
            info = os.waitid(os.P_PID, self.process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return None
        if info is None:
            return None
        return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status

    def ended(
        self, *, stderr: bytes = b"", duration_s: float = 0.0, timed_out: bool = False
    ) -> ExecResult:
        """Why the process ended, classified as `Sandbox.run` classifies a command (memory,
        CPU, file and process limits, a signal); then kill what it left. With `timed_out`, a
        process still running is killed and reported as a timeout."""
        launch = self._launch
        if timed_out:
            launch.kill()
        else:
            deadline = time.monotonic() + 5.0
            while not launch.exited() and time.monotonic() < deadline:
                time.sleep(0.01)
        events = _cgroup_events(launch.groups)
        self.kill()
        return _classify(
            backend=self.sandbox.backend,
            returncode=self.process.returncode if self.process.returncode is not None else -9,
            out=b"",
            err=stderr,
            truncated=False,
            timed_out=timed_out,
            closed=launch.killed_by_close,
            events=events,
            limits=self.sandbox.limits,
            cgroup_controllers=launch.controllers,
            duration=duration_s,
        )

    def kill(self, *, wait: bool = True) -> None:
        """Kill the process and everything it started; idempotent, safe from any thread. With
        `wait=False` only the signals are sent here, and reaping and cgroup removal happen on
        a background thread (for latency paths such as a reset on a loaded machine)."""
        with self.sandbox._lock:
            self.sandbox._children.discard(self)
        if wait:
            self._kill_and_reap()
        else:
            with self._launch._lock, contextlib.suppress(ProcessLookupError, PermissionError):
                if not self._launch.reaped:
                    os.killpg(self.process.pid, signal.SIGKILL)
            threading.Thread(target=self._kill_and_reap, daemon=True).start()

    def _kill_and_reap(self) -> None:
        self._launch.kill()
        with self._launch._lock:
            reaped = self._launch.reaped
        if not reaped:
            with contextlib.suppress(ChildProcessError):
                self._launch.reap()


_MEMORY_RE = re.compile(r"MemoryError|cannot allocate|std::bad_alloc|out of memory", re.IGNORECASE)
_FORK_RE = re.compile(r"fork: (retry: )?Resource temporarily unavailable|BlockingIOError")
#: Set in the environment of a process-backend command that no cgroup holds (see _kill_marked).
_SWEEP_VARIABLE = settings.SANDBOX_RUN.name
_FILE_RE = re.compile(r"File too large|File size limit exceeded")
#: After the first process exits, how long background processes may keep the pipes open.
_EXIT_GRACE_S = 0.5


def _kill_marked(entry: bytes, rounds: int = 10) -> None:
    """SIGKILL every process whose environment holds `entry` (this command's mark). Best
    effort, for the process backend without a cgroup: a process that clears its environment
    before escaping the process group is not found. Rounds repeat while a kill landed (its
    children may be forking) or while some process's environment read empty, which is what a
    process in the middle of exec'ing shows."""
    me = os.getpid()
    for _ in range(rounds):
        again = False
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == me:
                continue
            try:
                with open(f"/proc/{name}/environ", "rb") as handle:
                    environ = handle.read()
                if not environ:
                    again = again or not _kernel_thread(name)
                    continue
            except OSError:
                continue
            if entry in environ.split(b"\0"):
                again = True
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(int(name), signal.SIGKILL)
        if not again:
            return
        time.sleep(0.002)


def _kernel_thread(pid: str) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            flags = int(handle.read().rpartition(b")")[2].split()[6])
    except (OSError, ValueError, IndexError):
        return True
    return bool(flags & 0x00200000)  # PF_KTHREAD


def _controllers(groups: Optional[list[str]]) -> frozenset[str]:
    """Which limits the command's cgroups enforce for its whole tree ('memory', 'pids')."""
    found = set()
    for group in groups or ():
        with contextlib.suppress(OSError):
            names = os.listdir(group)
            if "memory.max" in names or "memory.limit_in_bytes" in names:
                found.add("memory")
            if "pids.max" in names:
                found.add("pids")
    return frozenset(found)


class _Prepare:
    """Runs in the child between fork and exec. The server is multi-threaded, so this does
    nothing that could wait on a lock another thread held at fork time (no imports, logging
    or pathlib): only system calls on values computed before the fork."""

    def __init__(
        self,
        limits: SandboxLimits,
        *,
        cgroup_procs: list[bytes],
        per_process_memory: bool,
        nproc: Optional[int],
    ) -> None:
        self.cgroup_procs = cgroup_procs
        self.rlimits: list[tuple[int, tuple[int, int]]] = [(resource.RLIMIT_CORE, (0, 0))]
        if limits.cpu_time_s is not None:
            seconds = max(1, math.ceil(limits.cpu_time_s))
            # SIGXCPU at the soft limit (reported as cpu_limit), SIGKILL a second later.
            self.rlimits.append((resource.RLIMIT_CPU, (seconds, seconds + 1)))
        if limits.max_file_mb is not None:
            size = limits.max_file_mb * 1024 * 1024
            self.rlimits.append((resource.RLIMIT_FSIZE, (size, size)))
        if per_process_memory and limits.memory_mb is not None:
            size = limits.memory_mb * 1024 * 1024
            self.rlimits.append((resource.RLIMIT_AS, (size, size)))
        if nproc is not None:
            self.rlimits.append((resource.RLIMIT_NPROC, (nproc, nproc)))

    def __call__(self) -> None:
        for procs in self.cgroup_procs:
            fd = os.open(procs, os.O_WRONLY)
            try:
                os.write(fd, b"0")  # "the writing process", in v1 and v2
            finally:
                os.close(fd)
        for which, values in self.rlimits:
            resource.setrlimit(which, values)


def _exited(process: subprocess.Popen[bytes]) -> bool:
    """Whether the first process ended, without reaping it (see `_Launch.exited`)."""
    try:
        info = os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


def _collect(
    process: subprocess.Popen[bytes],
    limits: SandboxLimits,
    started: float,
    stdin: Optional[bytes] = None,
) -> tuple[bytes, bytes, bool, bool]:
    """Feed stdin and read stdout and stderr until the command is over (its first process
    exited and the pipes closed, or a short grace passed), the wall clock runs out or the output
    cap is passed. Never reaps the process. Stdin is written without blocking, so a command (or
    an escaped background process) that never reads it cannot hang the server's thread.
    Returns (stdout, stderr, truncated, timed_out)."""
    deadline = started + limits.wall_time_s
    cap = limits.max_output_bytes
    chunks: dict[int, list[bytes]] = {1: [], 2: []}
    total = 0
    truncated = timed_out = False
    exited_at: Optional[float] = None
    # A pidfd turns readable when the process exits: no polling for the exit.
    pidfd = _pidfd(process.pid)
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ, 1)  # type: ignore[arg-type]
        selector.register(process.stderr, selectors.EVENT_READ, 2)  # type: ignore[arg-type]
        if pidfd is not None:
            selector.register(pidfd, selectors.EVENT_READ, 0)
        to_write = memoryview(stdin or b"")
        if process.stdin is not None:
            os.set_blocking(process.stdin.fileno(), False)
            selector.register(process.stdin, selectors.EVENT_WRITE, -1)
        try:
            while True:
                now = time.monotonic()
                if now >= deadline:
                    timed_out = True
                    break
                if exited_at is None and _exited(process):
                    exited_at = now
                    if pidfd is not None:
                        selector.unregister(pidfd)
                pipes_open = sum(key.data > 0 for key in selector.get_map().values())
                if exited_at is not None and (not pipes_open or now - exited_at > _EXIT_GRACE_S):
                    break  # over; a background process holding the pipes is killed by the caller
                if not pipes_open and pidfd is None:
                    # Both pipes closed, the command runs on, and no pidfd: poll for its end.
                    time.sleep(min(0.005, deadline - now))
                    continue
                for key, _ in selector.select(timeout=min(0.1, deadline - now)):
                    if key.data == 0:
                        continue  # exited: seen at the top of the loop
                    if key.data == -1:
                        to_write = _write_some(selector, process.stdin, to_write)
                        continue
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
        finally:
            if pidfd is not None:
                os.close(pidfd)
            if process.stdin is not None:
                with contextlib.suppress(OSError):
                    process.stdin.close()
    return b"".join(chunks[1]), b"".join(chunks[2]), truncated, timed_out


def _write_some(
    selector: selectors.BaseSelector, pipe: Optional[IO[bytes]], data: memoryview
) -> memoryview:
    """Write what the pipe takes now; close it when all is written or the reader is gone."""
    assert pipe is not None
    try:
        written = os.write(pipe.fileno(), data[:65536]) if data else 0
    except BlockingIOError:
        return data
    except OSError:  # the command closed its stdin (EPIPE): it wants no more
        written = len(data)
    data = data[written:]
    if not data:
        selector.unregister(pipe)
        with contextlib.suppress(OSError):
            pipe.close()
    return data


def _pidfd(pid: int) -> Optional[int]:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # an old kernel or Python: poll instead
        return None


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


def _classify(
    *,
    backend: str,
    returncode: int,
    out: bytes,
    err: bytes,
    truncated: bool,
    timed_out: bool,
    closed: bool,
    events: dict[str, int],
    limits: SandboxLimits,
    cgroup_controllers: frozenset[str],
    duration: float,
) -> ExecResult:
    """The typed result. Facts first: what the sandbox did itself (timeout, output cap,
    close), the cgroup's counters (OOM kills, refused forks), the signal that ended the command
    (the kernel sends SIGXCPU and SIGXFSZ for those limits). Words in stderr count only where
    no cgroup watches that limit, and only for a command that failed. Nothing here can
    produce SANDBOX_ERROR."""
    exit_code: Optional[int] = returncode if returncode >= 0 else None
    sig: Optional[int] = -returncode if returncode < 0 else None
    if backend == "bubblewrap" and exit_code is not None and 128 < exit_code < 128 + 65:
        # bubblewrap's init reports a command killed by signal N as exit status 128 + N.
        sig, exit_code = exit_code - 128, None
    # A shell reports a child killed by signal N the same way; the limits below count it.
    ended_by = sig
    if ended_by is None and exit_code is not None and 128 < exit_code < 128 + 65:
        ended_by = exit_code - 128
    failed = sig is not None or exit_code != 0
    tail = err[-4000:].decode("utf-8", "replace")
    status, message = ExecStatus.OK, ""
    if timed_out:
        status = ExecStatus.TIMEOUT
        message = f"ran past its {limits.wall_time_s:g} s wall-clock limit; every process killed"
        if events.get("pids_max"):
            message += " (it had also hit its process limit)"
    elif truncated:
        status = ExecStatus.OUTPUT_LIMIT
        message = f"printed more than {limits.max_output_bytes} bytes; every process killed"
    elif closed:
        status, message = (
            ExecStatus.KILLED,
            "stopped by the sandbox (closed, or its workspace cleared)",
        )
    elif events.get("oom_kill"):
        status, message = ExecStatus.MEMORY_LIMIT, "ran out of its memory limit (cgroup OOM kill)"
    elif ended_by == signal.SIGXCPU and limits.cpu_time_s is not None:
        status, message = ExecStatus.CPU_LIMIT, f"used up its {limits.cpu_time_s:g} s of CPU time"
    elif ended_by == signal.SIGXFSZ and limits.max_file_mb is not None:
        status = ExecStatus.FILE_LIMIT
        message = f"wrote a file larger than its {limits.max_file_mb} MB limit"
    elif events.get("pids_max"):
        status = ExecStatus.PROCESS_LIMIT
        message = f"hit its limit of {limits.max_processes} processes (cgroup)"
    elif failed and _fallback_hit(limits.memory_mb, "memory", cgroup_controllers, _MEMORY_RE, tail):
        status = ExecStatus.MEMORY_LIMIT
        message = "ran out of its memory limit (per-process rlimit; judged from its stderr)"
    elif failed and _fallback_hit(limits.max_processes, "pids", cgroup_controllers, _FORK_RE, tail):
        status = ExecStatus.PROCESS_LIMIT
        message = "hit its process limit (rlimit; judged from its stderr)"
    elif failed and limits.max_file_mb is not None and _FILE_RE.search(tail):
        status = ExecStatus.FILE_LIMIT
        message = "wrote a file larger than its limit (judged from its stderr)"
    elif sig is not None:
        status, message = ExecStatus.KILLED, f"killed by signal {sig}"
    elif exit_code:
        status = ExecStatus.ERROR
    return ExecResult(
        status=status,
        exit_code=exit_code,
        signal=sig,
        stdout=out.decode("utf-8", "replace"),
        stderr=err.decode("utf-8", "replace"),
        truncated=truncated,
        duration_s=round(duration, 6),
        backend=backend,
        message=message,
    )


def _fallback_hit(
    limit: Optional[int],
    controller: str,
    controllers: frozenset[str],
    words: re.Pattern[str],
    tail: str,
) -> bool:
    """A limit enforced by an rlimit (no cgroup counts it) that the command's stderr says it hit."""
    return limit is not None and controller not in controllers and words.search(tail) is not None
