"""The uv provider: an environment folder or git URL served from its own uv-made environment.

`uv run --isolated` builds a throwaway virtual environment from the folder's `pyproject.toml`
(uv's cache makes that a fraction of a second after the first time), so the environment gets
exactly the dependencies it declares, apart from the trainer's. The server runs as a process
tree in its own session, bound to loopback on a socket the provider binds first, so the port
is known without a race. It is recorded under `state_dir()`, dies with the trainer
(PR_SET_PDEATHSIG), and is removed by `openenv gc` if anything survives.

OpenEnv's `UVProvider` API is kept: `UVProvider(project_path=...)`, then the synchronous
`start()` -> URL, `wait_for_ready()`, `stop()` and `base_url`. Passing a spec (`await
provider.start("path/to/env")`) uses the async provider interface of `base.py` instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Optional, Union, overload
from urllib.parse import urlsplit

from openenv.core.utils import run_coroutine_sync
from openenv.isolation import cgroups
from openenv.isolation.spawn import set_parent_death_signal, spawn

from .base import (
    Provider,
    ProviderError,
    ProviderUnavailableError,
    Resource,
    StartedEnv,
    run_blocking,
)
from .ownership import LocalRecord, Owner, process_alive, process_start_time
from .records import LocalRecordResources, delete_paths, load_record, remove_record
from .spec import EnvSpec, SpecError, resolve_app

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

#: OpenEnv's default app: `server/app.py` in the environment folder.
DEFAULT_APP = "server.app:app"

#: Runs in the environment's own interpreter (standard library only: the folder may bring
#: OpenEnv's `openenv-core` rather than this openenv). It ties its life to uv's, applies the
#: limits no cgroup holds, arms the wall-time kill, reports its virtual environment (uv leaves
#: it behind when killed) and serves the app on the socket the provider bound.
_BOOT = r"""
import ctypes, json, os, resource, signal, sys, threading, time
cfg = json.loads(sys.argv[1])
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)
except Exception:
    pass
if os.getppid() != os.getsid(0):
    sys.exit("openenv: uv exited before the server started")
limits = cfg["rlimits"]
if limits.get("memory_mb"):
    size = int(limits["memory_mb"]) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (size, size))
if limits.get("pids"):
    try:
        resource.setrlimit(resource.RLIMIT_NPROC, (int(limits["pids"]),) * 2)
    except (ValueError, OSError):
        pass
if limits.get("cpus"):
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, cores[: max(1, -(-int(limits["cpus"] * 100) // 100))])
if cfg["wall_time_s"]:
    def _expire():
        time.sleep(cfg["wall_time_s"])
        print("openenv: wall time over, stopping", file=sys.stderr, flush=True)
        os.killpg(0, signal.SIGTERM)
        time.sleep(2.0)
        os.killpg(0, signal.SIGKILL)
    threading.Thread(target=_expire, daemon=True).start()
with open(cfg["boot"] + ".tmp", "w") as out:
    json.dump({"pid": os.getpid(), "prefix": sys.prefix}, out)
os.replace(cfg["boot"] + ".tmp", cfg["boot"])
app, fd, workers, reload = cfg["app"], cfg["fd"], cfg["workers"], cfg["reload"]
extra = {"reload_dirs": [os.getcwd()]} if reload else {}
try:
    from openenv.core.env_server.runner import run_server
except ImportError:
    import uvicorn
    uvicorn.run(app, fd=fd, workers=workers, reload=reload, **extra)
else:
    if workers > 1 and not reload:
        os.close(fd)  # the multi-worker server binds the port itself, one socket per worker
        run_server(app, host=cfg["host"], port=cfg["port"], workers=workers)
    else:
        run_server(app, host=cfg["host"], port=cfg["port"], reload=reload, fd=fd, **extra)
"""


# -- spawning -------------------------------------------------------------------------------


def _child_setup(cgroup_folders: Optional[list[str]]) -> Callable[[], None]:
    def setup() -> None:
        # SIGTERM, not SIGKILL: uv forwards it to the server and deletes its environment.
        set_parent_death_signal(signal.SIGTERM)
        if cgroup_folders:
            cgroups.add_process(cgroup_folders)

    return setup


# -- what to run ----------------------------------------------------------------------------


def is_git_target(target: str) -> bool:
    return target.startswith("git+")


def split_git_target(target: str) -> tuple[str, Optional[str], Optional[str]]:
    """`git+URL[@REF][#subdirectory=PATH]` -> (URL, REF, PATH), as pip spells VCS targets."""
    url = target[len("git+") :]
    url, _, fragment = url.partition("#")
    subdirectory = None
    for part in fragment.split("&"):
        key, _, value = part.partition("=")
        if key == "subdirectory" and value:
            subdirectory = value
    ref = None
    parts = urlsplit(url)
    if "@" in parts.path:  # an '@' in the user part (git@host) is not a ref
        path, _, ref = parts.path.rpartition("@")
        url = parts._replace(path=path).geturl()
    return url, ref or None, subdirectory


def _requirement_name(requirement: str) -> str:
    name = requirement.strip()
    for stop in "[<>=!~;@ (":
        name = name.split(stop, 1)[0]
    return name.strip().lower().replace("_", "-").replace(".", "-")


def _openenv_checkout() -> Optional[Path]:
    from openenv.cli.wheels import WheelError, openenv_source_root

    try:
        return openenv_source_root()
    except WheelError:
        return None


def needs_openenv_source(folder: Path) -> bool:
    """Whether uv cannot get `openenv` for this folder by itself.

    The published package named `openenv` on the index is a different project, so a folder
    that depends on `openenv` needs a source: its `[tool.uv.sources]`, or a uv workspace that
    has openenv as a member. OpenEnv's `openenv-core` is left to the index.
    """
    try:
        data = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return True  # not a project: the server needs openenv from somewhere
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SpecError(f"cannot read {folder / 'pyproject.toml'}: {exc}") from None
    requirements = data.get("project", {}).get("dependencies", [])
    if "openenv" not in {_requirement_name(r) for r in requirements if isinstance(r, str)}:
        return False
    source = data.get("tool", {}).get("uv", {}).get("sources", {}).get("openenv")
    if isinstance(source, dict):
        if "path" in source:
            return not (folder / str(source["path"]) / "pyproject.toml").is_file()
        if not source.get("workspace"):
            return False  # git or url source: uv fetches it
    from openenv.cli.commands.init import openenv_workspace

    return openenv_workspace(folder.resolve()) is None


def uv_command(
    uv: str, folder: Path, openenv_source: Optional[Path], boot_config: dict[str, Any]
) -> list[str]:
    """`uv run --isolated ... -- python -c BOOT CONFIG` for `folder`.

    With `openenv_source`, the folder is installed next to that openenv instead of being run as
    its own project: uv then takes `openenv` from there, not from the index.
    """
    command = [uv, "run", "--isolated", "--no-progress"]
    if openenv_source is None:
        command += ["--project", str(folder)]
    else:
        command += ["--no-project", "--with-editable", str(openenv_source)]
        if (folder / "pyproject.toml").is_file():
            command += ["--with-editable", str(folder)]
        else:
            for requirements in (folder / "requirements.txt", folder / "server/requirements.txt"):
                if requirements.is_file():
                    command += ["--with-requirements", str(requirements)]
    return [*command, "--", "python", "-c", _BOOT, json.dumps(boot_config)]


def _bind(host: str, port: int) -> socket.socket:
    """The server's socket, bound (not listening: connections are refused until it serves)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ProviderError(
            f"uv: cannot bind {host}:{port}: {exc.strerror}; choose another port or leave it "
            "unset to get a free one"
        ) from None
    return sock


def _url_host(host: str) -> str:
    if host in ("0.0.0.0", "::", ""):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


def _uv_cache_dir() -> Path:
    configured = os.environ.get("UV_CACHE_DIR")
    if configured:
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "uv"


def _uv_env_dirs(record: LocalRecord) -> list[Path]:
    """The throwaway environment uv made for a record's server (uv deletes it unless killed).

    The server reported it in boot.json; as the environment's code could rewrite that file,
    only a scratch folder directly in uv's cache is accepted, never a project's .venv or a
    system Python."""
    dirs = []
    cache = _uv_cache_dir().resolve()
    for folder in record.cleanup_paths or ():
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            prefix = Path(json.loads((Path(folder) / "boot.json").read_text())["prefix"])
            if (
                prefix.name.startswith(".tmp")
                and prefix.parent.name.startswith("builds-v")
                and prefix.parent.parent.resolve() == cache
            ):
                dirs.append(prefix)
    return dirs


def _tail(path: str, lines: int) -> str:
    try:
        with open(path, "rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - 64 * 1024))
            text = log.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class UVProvider(LocalRecordResources, Provider):
    """Runs an environment folder (or `git+URL`) with `uv run --isolated`, on loopback.

    Isolation: its own dependencies, session and (where cgroups are writable) resource
    ceilings. It shares the machine's file system, users and network: use the sandbox or
    Docker providers for untrusted code.
    """

    name = "uv"
    default_network = "egress"

    def __init__(
        self,
        *,
        project_path: Optional[str] = None,
        app: str = DEFAULT_APP,
        host: str = "127.0.0.1",
        reload: bool = False,
        env_vars: Optional[dict[str, str]] = None,
        context_timeout_s: float = 60.0,
        openenv_source: Optional[str] = None,
        stop_grace_s: float = 5.0,
    ) -> None:
        """`project_path` is what OpenEnv's `start()` runs (a folder or `git+URL`); `app`
        overrides the folder's `openenv.yaml`; `openenv_source` is an openenv checkout to
        install beside the folder (default: this one, when the folder has no source of its
        own for `openenv`)."""
        super().__init__()
        self.project_path = project_path
        self.app = app
        self.host = host
        self.reload = reload
        self.env_vars = dict(env_vars or {})
        self.context_timeout_s = context_timeout_s
        self.openenv_source = openenv_source
        self.stop_grace_s = stop_grace_s
        self.workers = 1
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._records: dict[str, LocalRecord] = {}

    @classmethod
    def check_available(cls) -> None:
        if shutil.which("uv") is None:
            raise ProviderUnavailableError("uv provider: uv is not installed; `pip install uv`")

    # -- resources: the shared record helpers, plus uv's leftover scratch environment -----------

    @classmethod
    def remove_resource(cls, resource: Resource) -> None:
        record = load_record(resource.id)
        if record is not None:
            cls._remove(record, grace_s=0.0)

    @staticmethod
    def _remove(record: LocalRecord, grace_s: float) -> None:
        leftovers = _uv_env_dirs(record)  # read before the record's folders go
        remove_record(record, grace_s=grace_s)
        delete_paths([str(path) for path in leftovers])

    # -- OpenEnv's RuntimeProvider API, beside the async one ------------------------------------

    @overload
    def start(
        self, spec: Union[EnvSpec, str], *, wait: bool = True, **fields: Any
    ) -> Coroutine[Any, Any, StartedEnv]: ...

    @overload
    def start(
        self,
        spec: Optional[int] = None,
        env_vars: Optional[dict[str, str]] = None,
        workers: int = 1,
        *,
        port: Optional[int] = None,
    ) -> str: ...

    def start(self, spec: Any = None, *args: Any, **kwargs: Any) -> Any:
        """With a spec (`await provider.start("envs/echo_env")`): the async provider interface.

        Without one: OpenEnv's `start(port=None, env_vars=None, workers=1)`, which starts
        `project_path` and returns its URL at once; `wait_for_ready()` then waits for it.
        """
        if isinstance(spec, (EnvSpec, str)):
            return Provider.start(self, spec, *args, **kwargs)
        if spec is None:
            return self._start_compat(*args, **kwargs)
        return self._start_compat(spec, *args, **kwargs)

    def _start_compat(
        self,
        port: Optional[int] = None,
        env_vars: Optional[dict[str, str]] = None,
        workers: int = 1,
        **kwargs: Any,
    ) -> str:
        if self.project_path is None:
            raise ProviderError("UVProvider.start() needs project_path (a folder or git+URL)")
        if self._compat_env is not None:
            raise ProviderError("this UVProvider already runs its project; call stop() first")
        if kwargs:
            raise TypeError(f"UVProvider.start() got unexpected arguments {sorted(kwargs)}")
        self.workers = workers
        spec = EnvSpec.of(
            self.project_path,
            port=port,
            env_vars=dict(env_vars or {}),
            ready_timeout_s=self.context_timeout_s,
        )
        env = run_coroutine_sync(Provider.start(self, spec, wait=False))
        self._compat_env = env
        return env.base_url

    @overload
    def stop(self, env: Union[StartedEnv, str]) -> Coroutine[Any, Any, None]: ...

    @overload
    def stop(self, env: None = None) -> None: ...

    def stop(self, env: Any = None) -> Any:
        """`await stop(env)` stops one environment; `stop()` is OpenEnv's, for `start()`'s."""
        if env is not None:
            return Provider.stop(self, env)
        self.stop_container()
        return None

    def stop_container(self) -> None:
        compat, self._compat_env = self._compat_env, None
        if compat is not None:
            run_coroutine_sync(Provider.stop(self, compat))

    def wait_for_ready(
        self, base_url: Union[str, float, None] = None, timeout_s: Optional[float] = None
    ) -> None:
        """OpenEnv's `wait_for_ready(timeout_s=None)`: `context_timeout_s` when not given."""
        if isinstance(base_url, (int, float)):
            timeout_s = float(base_url)
        super().wait_for_ready(None, self.context_timeout_s if timeout_s is None else timeout_s)

    @property
    def base_url(self) -> Optional[str]:
        """URL of the environment `start()` started (OpenEnv's property)."""
        return self._compat_env.base_url if self._compat_env is not None else None

    def __enter__(self) -> UVProvider:
        """As OpenEnv's RuntimeProvider: starts `project_path` when one was given."""
        if self.project_path is not None and self._compat_env is None:
            self._start_compat()
            try:
                self.wait_for_ready()
            except BaseException:
                self.stop_container()
                raise
        return self

    async def close(self) -> None:
        self._compat_env = None
        await super().close()

    # -- the provider -------------------------------------------------------------------------

    async def _start(self, spec: EnvSpec) -> StartedEnv:
        if spec.network == "none":
            raise SpecError(
                "the uv provider runs a plain process on the machine's network; use "
                "provider='sandbox' for network='none'"
            )
        record = LocalRecord(
            id=f"uv-{uuid.uuid4().hex[:12]}",
            provider=self.name,
            owner=Owner.current(),
            pid=0,
            pid_start=None,
            created_at=time.time(),
            target=spec.target,
        )
        launch = asyncio.ensure_future(run_blocking(self._launch, spec, record))
        try:
            return await asyncio.shield(launch)
        except asyncio.CancelledError:
            # The thread goes on and may start the server: stop it once it has.
            with contextlib.suppress(BaseException):
                await self._stop(await launch)
            raise

    def _launch(self, spec: EnvSpec, record: LocalRecord) -> StartedEnv:
        workdir = Path(tempfile.mkdtemp(prefix="openenv-uv-"))
        record.cleanup_paths = [str(workdir)]
        record.save()  # first: a trainer killed from here on leaves a record for `openenv gc`
        sock: Optional[socket.socket] = None
        try:
            folder = self._folder(spec.target, workdir)
            if not is_git_target(spec.target):
                record.target = str(folder)
            app = self._app(folder)
            source = self._openenv_source(folder)
            uv = shutil.which("uv")
            if uv is None:
                raise ProviderUnavailableError("uv provider: uv is not installed; `pip install uv`")
            sock = _bind(self.host, spec.port or 0)
            port = sock.getsockname()[1]
            config = {
                "app": app,
                "fd": sock.fileno(),
                "host": self.host,
                "port": port,
                "workers": self.workers,
                "reload": self.reload,
                "boot": str(workdir / "boot.json"),
                "wall_time_s": spec.limits.wall_time_s,
                "rlimits": {},
            }
            ceilings = spec.limits.model_copy(update={"wall_time_s": None})
            if not ceilings.is_empty():
                record.cgroup = cgroups.create(record.id, ceilings)
                record.save()
                if record.cgroup is None:
                    config["rlimits"] = ceilings.model_dump(exclude_none=True)
            environ = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
            environ.update(self.env_vars)
            environ.update(spec.env_vars)
            environ["PYTHONUNBUFFERED"] = "1"
            command = uv_command(uv, folder, source, config)
            log = open(workdir / "server.log", "wb")
            fd = sock.fileno()
            try:
                proc = spawn(
                    lambda: subprocess.Popen(
                        command,
                        cwd=folder,
                        env=environ,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        pass_fds=(fd,),
                        start_new_session=True,
                        preexec_fn=_child_setup(record.cgroup),
                    )
                )
            finally:
                log.close()
            record.pid = proc.pid
            record.pid_start = process_start_time(proc.pid)
            record.base_url = f"http://{_url_host(self.host)}:{port}"
            record.save()
        except BaseException:
            with contextlib.suppress(Exception):
                remove_record(record)
            raise
        finally:
            if sock is not None:
                sock.close()  # the server holds its own copy
        self._procs[record.id] = proc
        self._records[record.id] = record
        return StartedEnv(
            id=record.id,
            provider=self.name,
            spec=spec,
            base_url=record.base_url,
            owner=record.owner,
            created_at=record.created_at,
            info={
                "pid": proc.pid,
                "folder": str(folder),
                "app": app,
                "cgroup": record.cgroup,
                "openenv_source": str(source) if source else None,
                "log": str(workdir / "server.log"),
            },
        )

    def _folder(self, target: str, workdir: Path) -> Path:
        if is_git_target(target):
            return self._clone(target, workdir / "src")
        folder = Path(target).expanduser()
        if not folder.is_dir():
            raise SpecError(
                f"uv provider: {target!r} is not a folder or a git+URL; it runs an environment "
                "folder (`openenv init` makes one). For an installed environment use "
                "provider='local'"
            )
        return folder.resolve()

    @staticmethod
    def _clone(target: str, dest: Path) -> Path:
        git = shutil.which("git")
        if git is None:
            raise ProviderUnavailableError(
                "uv provider: git is needed for git+ targets; install git"
            )
        url, ref, subdirectory = split_git_target(target)
        command = [git, "clone", "--quiet", "--depth", "1"]
        if ref:
            command += ["--branch", ref]
        result = subprocess.run(
            [*command, "--", url, str(dest)],
            capture_output=True,
            text=True,
            env={**os.environ, "GIT_TERMINAL_PROMPT": "0"},
        )
        if result.returncode != 0:
            raise ProviderError(
                f"uv provider: git clone of {url} failed: {result.stderr.strip()[-500:]}"
            )
        folder = (dest / subdirectory).resolve() if subdirectory else dest
        if not folder.is_dir() or not folder.is_relative_to(dest.resolve()):
            raise SpecError(f"uv provider: {target!r} has no folder {subdirectory!r}")
        return folder

    def _app(self, folder: Path) -> str:
        if self.app != DEFAULT_APP or not (folder / "openenv.yaml").is_file():
            return self.app
        return resolve_app(str(folder)).app

    def _openenv_source(self, folder: Path) -> Optional[Path]:
        if self.openenv_source is not None:
            return Path(self.openenv_source).expanduser().resolve()
        if not needs_openenv_source(folder):
            return None
        checkout = _openenv_checkout()
        if checkout is None:
            raise SpecError(
                f"uv provider: {folder} depends on `openenv` but says not where uv gets it (the "
                "package of that name on the index is another project). Add `openenv = { path "
                '= "<openenv checkout>" }` under [tool.uv.sources] in its pyproject.toml, or '
                "pass UVProvider(openenv_source=<checkout>)"
            )
        return checkout

    async def _stop(self, env: StartedEnv) -> None:
        record = self._records.pop(env.id, None) or load_record(env.id)
        proc = self._procs.pop(env.id, None)
        if record is not None:
            await run_blocking(self._remove, record, self.stop_grace_s)
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                await run_blocking(proc.wait, 5.0)

    async def _alive(self, env: StartedEnv) -> bool:
        proc = self._procs.get(env.id)
        if proc is not None:
            # A multi-threaded uv whose main thread has exited is a zombie that waitpid cannot
            # reap until its last thread is gone: `poll()` alone still calls it running.
            return proc.poll() is None and process_alive(proc.pid, None)
        record = self._records.get(env.id) or load_record(env.id)
        return record is not None and record.running()

    async def log_tail(self, env: StartedEnv, lines: int = 40) -> str:
        path = env.info.get("log")
        return _tail(path, lines) if path else ""
