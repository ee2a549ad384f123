"""Resource ceilings and whole-tree kill for local processes, through Linux cgroups.

A cgroup holds every process an environment starts, however it forks, so "kill the
environment" means "kill the cgroup" and the memory, process and CPU ceilings hold for the whole
tree. Both hierarchies are handled: v2 (unified) and v1 (one folder per controller). Where no
cgroup folder is writable (an unprivileged user without systemd delegation), `create` returns
None and the caller falls back to rlimits, which bound each process, not the tree.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from functools import cache
from pathlib import Path
from typing import Optional

from openenv import settings

from .limits import ResourceLimits

ROOT = Path(settings.CGROUP_ROOT.get() or "/sys/fs/cgroup")
GROUP = "openenv"
_CPU_PERIOD_US = 100_000


def _writable(path: Path) -> bool:
    return path.is_dir() and os.access(path, os.W_OK)


@cache
def mode() -> Optional[str]:
    """'v2', 'v1' or None (no writable hierarchy with the controllers we need)."""
    if (ROOT / "cgroup.controllers").is_file():
        return "v2" if _v2_base() is not None else None
    if all(_writable(ROOT / c) for c in ("memory", "pids")):
        return "v1"
    return None


@cache
def _v2_base() -> Optional[Path]:
    """Our folder in the unified hierarchy, with memory/pids/cpu delegated to its children."""
    base = ROOT / GROUP
    try:
        base.mkdir(exist_ok=True)
        available = set((ROOT / "cgroup.controllers").read_text().split())
        wanted = [c for c in ("memory", "pids", "cpu") if c in available]
        for folder in (ROOT, base):
            enabled = set((folder / "cgroup.subtree_control").read_text().split())
            missing = [c for c in wanted if c not in enabled]
            if missing:
                (folder / "cgroup.subtree_control").write_text(" ".join("+" + c for c in missing))
        return base
    except OSError:
        return None


def _own_path(controller: str) -> str:
    """This process's cgroup in a v1 hierarchy ('/' when unknown)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controller in controllers.split(","):
                return path
    return "/"


def create(name: str, limits: ResourceLimits) -> Optional[list[str]]:
    """Make the cgroup(s) for one environment and set its limits; None if not possible."""
    kind = mode()
    try:
        if kind == "v2":
            base = _v2_base()
            assert base is not None
            folder = base / name
            folder.mkdir()
            if limits.memory_mb:
                (folder / "memory.max").write_text(str(limits.memory_mb * 1024 * 1024))
                with contextlib.suppress(OSError):
                    (folder / "memory.swap.max").write_text("0")
            if limits.pids:
                (folder / "pids.max").write_text(str(limits.pids))
            if limits.cpus:
                quota = int(limits.cpus * _CPU_PERIOD_US)
                with contextlib.suppress(OSError):
                    (folder / "cpu.max").write_text(f"{quota} {_CPU_PERIOD_US}")
            return [str(folder)]
        if kind == "v1":
            folders = []
            for controller in ("memory", "pids", "cpu"):
                # Below our own cgroup, so environments stay inside whatever holds the trainer
                # (a container's or a job's memory ceiling is not escaped).
                parent = ROOT / controller / _own_path(controller).lstrip("/")
                if not _writable(parent):
                    parent = ROOT / controller
                    if not _writable(parent):
                        continue
                folder = parent / GROUP / name
                folder.mkdir(parents=True)
                folders.append(str(folder))
                if controller == "memory" and limits.memory_mb:
                    (folder / "memory.limit_in_bytes").write_text(
                        str(limits.memory_mb * 1024 * 1024)
                    )
                    with contextlib.suppress(OSError):
                        (folder / "memory.memsw.limit_in_bytes").write_text(
                            str(limits.memory_mb * 1024 * 1024)
                        )
                if controller == "pids" and limits.pids:
                    (folder / "pids.max").write_text(str(limits.pids))
                if controller == "cpu" and limits.cpus:
                    (folder / "cpu.cfs_period_us").write_text(str(_CPU_PERIOD_US))
                    (folder / "cpu.cfs_quota_us").write_text(str(int(limits.cpus * _CPU_PERIOD_US)))
            return folders
    except OSError:
        return None
    return None


def add_process(folders: list[str], pid: int = 0) -> None:
    """Move `pid` (0: the caller) into the cgroups; its future children follow."""
    for folder in folders:
        Path(folder, "cgroup.procs").write_text(str(pid or os.getpid()))


def pids(folder: str) -> list[int]:
    with contextlib.suppress(OSError):
        return [int(line) for line in Path(folder, "cgroup.procs").read_text().split()]
    return []


def kill_and_remove(folder: str) -> None:
    """SIGKILL every process in the cgroup (again, until none is left) and delete it."""
    path = Path(folder)
    if not path.is_dir():
        return
    kill_file = path / "cgroup.kill"
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        members = pids(folder)
        if not members:
            break
        if kill_file.exists():
            with contextlib.suppress(OSError):
                kill_file.write_text("1")
        else:
            for pid in members:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)
    with contextlib.suppress(OSError):
        path.rmdir()
