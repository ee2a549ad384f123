"""The fork server: a warm Python process that forks environment servers on request.

Importing an environment's server (FastAPI, pydantic models, fastmcp, a simulator) takes
seconds; forking a process that already imported it takes milliseconds. The trainer starts one
zygote per interpreter and folder (`python -m openenv.providers.zygote`), which imports an app
the first time it is asked for and from then on forks a child per environment. Children share
the imported code copy-on-write.

The zygote never runs an event loop or a thread of its own, so forking it is safe. It talks to
the trainer with JSON lines on stdin/stdout. When stdin closes (the trainer exited, crashed or
was killed), it kills every child's process tree and exits: environments never outlive their
trainer by more than that. Children die with the zygote too (PR_SET_PDEATHSIG: the zygote is
single-threaded, so the signal means what it says).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib
import json
import os
import resource
import select
import signal
import socket
import sys
import time
import traceback
from typing import Any, Optional

from openenv import settings

_PR_SET_PDEATHSIG = 1


def _set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)


class Zygote:
    def __init__(self, out: Any) -> None:
        self.out = out
        #: pid -> (wall-time deadline or None, cgroup folders)
        self.children: dict[int, tuple[Optional[float], list[str]]] = {}
        self.loaded: dict[str, Any] = {}

    # -- requests ------------------------------------------------------------------------

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "preload":
            self.load(request["app"])
            return {"ok": True}
        if op == "spawn":
            return self.spawn(request)
        if op == "ping":
            return {"ok": True, "pid": os.getpid(), "children": sorted(self.children)}
        return {"ok": False, "error": f"unknown op {op!r}"}

    def load(self, app: str) -> Any:
        """Import `module:attr` in the zygote, once, so every child starts warm."""
        if app not in self.loaded:
            module_name, _, attr = app.partition(":")
            module = importlib.import_module(module_name)
            value: Any = module
            for part in (attr or "app").split("."):
                value = getattr(value, part)
            self.loaded[app] = value
            _warm_server_stack()
            _warm_environment(value)
            # Objects imported so far are shared by every child: keep the collector off them, so
            # a child's collections neither walk nor dirty (copy) those pages.
            gc.collect()
            gc.freeze()
        return self.loaded[app]

    def spawn(self, request: dict[str, Any]) -> dict[str, Any]:
        try:
            self.load(request["app"])
        except BaseException as exc:  # an import error belongs to the environment, not to us
            return {"ok": False, "error": f"cannot import {request['app']}: {exc!r}"}
        ready_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the environment
            os.close(ready_r)
            code = 1
            try:
                _child(request, ready_w)
                code = 0
            except BaseException as exc:
                with contextlib.suppress(Exception):
                    traceback.print_exc()  # into the environment's log once redirected
                with contextlib.suppress(Exception):
                    os.write(ready_w, json.dumps({"error": repr(exc)}).encode() + b"\n")
            finally:
                os._exit(code)
        os.close(ready_w)
        report = _read_report(ready_r, timeout=30.0)
        os.close(ready_r)
        if "error" in report:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
            return {"ok": False, "error": report["error"]}
        wall = (request.get("limits") or {}).get("wall_time_s")
        self.children[pid] = (
            time.monotonic() + wall if wall else None,
            request.get("cgroups") or [],
        )
        return {"ok": True, "pid": pid, "port": report.get("port")}

    # -- lifecycle -----------------------------------------------------------------------

    def reap(self) -> None:
        """Collect exited children and kill what they left in their group or cgroup."""
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            entry = self.children.pop(pid, None)
            if entry is not None:
                self._kill_tree(pid, entry[1])

    def enforce_wall_time(self) -> None:
        now = time.monotonic()
        for pid, (deadline, cgroups) in list(self.children.items()):
            if deadline is not None and now >= deadline:
                self._kill_tree(pid, cgroups)

    def next_timeout(self) -> float:
        deadlines = [d for d, _ in self.children.values() if d is not None]
        if not deadlines:
            return 1.0
        return max(0.0, min(1.0, min(deadlines) - time.monotonic()))

    @staticmethod
    def _kill_tree(pid: int, cgroups: list[str]) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        if cgroups:
            from openenv.isolation import cgroups as cg

            for folder in cgroups:
                cg.kill_and_remove(folder)

    def shutdown(self) -> None:
        for pid, (_, cgroups) in list(self.children.items()):
            self._kill_tree(pid, cgroups)
        self.reap()

    def serve(self, stdin_fd: int) -> None:
        buffer = b""
        while True:
            ready, _, _ = select.select([stdin_fd], [], [], self.next_timeout())
            self.reap()
            self.enforce_wall_time()
            if not ready:
                continue
            chunk = os.read(stdin_fd, 65536)
            if not chunk:  # the trainer is gone
                self.shutdown()
                return
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                if not line.strip():
                    continue
                try:
                    reply = self.handle(json.loads(line))
                except Exception as exc:
                    reply = {"ok": False, "error": repr(exc)}
                self.out.write(json.dumps(reply) + "\n")
                self.out.flush()


def _warm_server_stack() -> None:
    """Import what every child would otherwise import when uvicorn starts serving."""
    from openenv.core.env_server.runner import uvicorn_options

    options = uvicorn_options()
    modules = ["uvicorn", "uvicorn.server", "uvicorn.config", "uvicorn.lifespan.on"]
    modules += {
        "uvloop": ["uvloop"],
        "asyncio": ["uvicorn.loops.asyncio"],
    }.get(options["loop"], [])
    modules += {
        "httptools": ["uvicorn.protocols.http.httptools_impl"],
        "h11": ["uvicorn.protocols.http.h11_impl"],
    }.get(options["http"], [])
    if options["ws"] == "websockets-sansio":
        modules.append("uvicorn.protocols.websockets.websockets_sansio_impl")
    for name in modules:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    # Imported lazily by libraries on an app's first session; paid here once instead of by
    # every child's first step (fastmcp's per-session machinery parses docstrings with griffe).
    for package, lazy in _LAZY_IMPORTS.items():
        if package in sys.modules:
            for name in lazy:
                with contextlib.suppress(Exception):
                    importlib.import_module(name)


_LAZY_IMPORTS = {
    "anyio": ["anyio._backends._asyncio", "anyio.streams.stapled"],
    "fastmcp": [
        "fastmcp.server.context",
        "fastmcp.server.sessions",
        "fastmcp.server.elicitation",
        "fastmcp.server.middleware.dereference",
        "fastmcp.server.providers.prefab_synthesis",
        "griffe",
    ],
}


def _warm_environment(app: Any) -> None:
    """Build and close one environment, so first-use costs (schema generation, caches) are paid
    here instead of by every child's first session. `OPENENV_ZYGOTE_WARMUP=0` turns it off for
    an environment whose constructor has side effects."""
    if not settings.ZYGOTE_WARMUP.get():
        return
    server = getattr(getattr(app, "state", None), "openenv_server", None)
    factory = getattr(getattr(server, "manager", None), "factory", None)
    if factory is None:
        return
    import threading

    threads = set(threading.enumerate())
    try:
        env = factory()
        warm_imports = getattr(env, "warm_imports", None)
        if callable(warm_imports):
            warm_imports()
        close = getattr(env, "close", None)
        if callable(close):
            close()
    except Exception as exc:
        print(f"openenv zygote: warm-up of {app!r} failed: {exc!r}", file=sys.stderr)
        return
    extra = [t.name for t in threading.enumerate() if t not in threads and t.is_alive()]
    if extra:
        # Forking with foreign threads is unsafe (locks they hold stay held in the child).
        print(
            f"openenv zygote: warm-up left threads running {extra}; set "
            "OPENENV_ZYGOTE_WARMUP=0 for this environment",
            file=sys.stderr,
        )


def _read_report(fd: int, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    data = b""
    while b"\n" not in data:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return {"error": "the environment did not report its address in time"}
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            continue
        chunk = os.read(fd, 4096)
        if not chunk:
            return {"error": "the environment exited while starting (see its log)"}
        data += chunk
    report: dict[str, Any] = json.loads(data.split(b"\n", 1)[0])
    return report


def _apply_rlimits(limits: dict[str, Any]) -> None:
    """Per-process ceilings where no cgroup holds the tree."""
    memory = limits.get("memory_mb")
    if memory:
        size = int(memory) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (size, size))
    pids = limits.get("pids")
    if pids:
        # Counted per user, and not enforced for root: a weak ceiling, documented as such.
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NPROC, (int(pids), int(pids)))


def _child(request: dict[str, Any], ready_fd: int) -> None:
    """In the forked child: detach, confine, bind, report the address, serve."""
    os.setsid()  # its own process group: the whole tree is killed with one killpg
    _set_parent_death_signal()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    cgroups = request.get("cgroups") or []
    if cgroups:
        from openenv.isolation import cgroups as cg

        cg.add_process(cgroups)
    limits = request.get("limits") or {}
    if not cgroups:
        _apply_rlimits(limits)
    cpus = limits.get("cpus")
    if cpus and not cgroups and hasattr(os, "sched_setaffinity"):
        available = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, available[: max(1, int(-(-cpus // 1)))])

    # Output goes to the environment's log file, never to the zygote's pipe to the trainer.
    log_fd = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    os.close(devnull)
    if _REPLY_FD is not None:
        # The pipe to the trainer is the zygote's alone: an environment must not forge replies.
        with contextlib.suppress(OSError):
            os.close(_REPLY_FD)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)

    env = request.get("env") or {}
    os.environ.update(env)
    if request.get("cwd"):
        os.chdir(request["cwd"])

    isolate = request.get("isolate")
    if isolate:
        # Confinement binds the socket itself: after its namespaces exist, before it hides the
        # folders shared with other environments.
        from openenv.isolation import namespaces as isolation

        sock = isolation.enter(isolate, lambda: bind_server_socket(request), keep_fds=(ready_fd,))
    else:
        sock = bind_server_socket(request)
    port = sock.getsockname()[1] if sock.family != socket.AF_UNIX else None
    os.write(ready_fd, json.dumps({"port": port}).encode() + b"\n")
    os.close(ready_fd)

    app = load_app(request["app"], reimport=bool(env))
    serve_app(app, sock)


def bind_server_socket(request: dict[str, Any]) -> socket.socket:
    uds = request.get("uds")
    if uds:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(uds)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(uds)
        os.chmod(uds, 0o600)
    else:
        host = request.get("host") or "127.0.0.1"
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, int(request.get("port") or 0)))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def load_app(app: str, *, reimport: bool) -> Any:
    """The app object; re-executed when the spec set environment variables, since apps read
    their settings (MAX_CONCURRENT_ENVS, game ids, ...) when they are built."""
    module_name, _, attr = app.partition(":")
    if reimport:
        sys.modules.pop(module_name, None)
    module = importlib.import_module(module_name)
    value: Any = module
    for part in (attr or "app").split("."):
        value = getattr(value, part)
    return value


def serve_app(app: Any, sock: socket.socket) -> None:
    import uvicorn

    from openenv.core.env_server.runner import uvicorn_options

    options = uvicorn_options()
    options["log_level"] = settings.LOG_LEVEL.get() or "warning"
    config = uvicorn.Config(app, **options)
    uvicorn.Server(config).run(sockets=[sock])


#: The zygote's end of its reply pipe (closed in every child).
_REPLY_FD: Optional[int] = None


def main() -> None:
    # Not the trainer's terminal: a Ctrl-C there must not kill environments mid-cleanup; the
    # trainer stops them, or closing stdin does.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # No parent-death signal here: it fires when the *thread* that started us exits (a
    # trainer's worker thread, say), not the trainer. A dead trainer closes our stdin instead.

    def on_sigterm(*_: Any) -> None:
        zygote.shutdown()
        os._exit(0)

    signal.signal(signal.SIGTERM, on_sigterm)
    global _REPLY_FD
    _REPLY_FD = os.dup(1)
    out = os.fdopen(_REPLY_FD, "w")
    # Anything an imported module prints must not corrupt the reply stream.
    os.dup2(2, 1)
    zygote = Zygote(out)
    for app in sys.argv[1:]:
        with contextlib.suppress(Exception):
            zygote.load(app)
    out.write(json.dumps({"ok": True, "pid": os.getpid()}) + "\n")
    out.flush()
    zygote.serve(0)


if __name__ == "__main__":
    main()
