"""Who started a resource, and whether they are still alive.

Every process, sandbox, container and service a provider starts carries its owner: host, boot,
pid and the pid's start time. A pid alone is not an identity (pids are reused); with its start
time and the boot id it is. When the owner is gone (exited, crashed, killed with SIGKILL), the
resource is an orphan and `openenv gc`, or any provider starting up, removes it.

Resources that live outside any engine (local processes and sandboxes) are recorded as one JSON
file each under the state folder, so a later process can find and remove them.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any, Optional

from openenv import settings

#: Label prefix on containers and services; the same keys name the fields of local records.
LABEL_PREFIX = "org.openenv."
MANAGED_LABEL = LABEL_PREFIX + "managed"


_HAS_PROC = Path("/proc/self/stat").exists()


@cache
def boot_id() -> str:
    with contextlib.suppress(OSError):
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    return "unknown"


def process_start_time(pid: int) -> Optional[int]:
    """Start time of `pid` in clock ticks since boot, None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19])


def process_alive(pid: int, start_time: Optional[int]) -> bool:
    """True when `pid` still runs and is the same process (same start time) as recorded."""
    if not _HAS_PROC:  # no /proc (macOS): existence is all we can check
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    current = process_start_time(pid)
    if current is None:
        return False
    if start_time is not None and current != start_time:
        return False
    with contextlib.suppress(OSError):
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        if state in ("Z", "X"):
            return False
    return True


@dataclass(frozen=True)
class Owner:
    """The process that started a resource."""

    host: str
    boot: str
    pid: int
    start_time: int

    @classmethod
    def current(cls) -> Owner:
        pid = os.getpid()
        return cls(socket.gethostname(), boot_id(), pid, process_start_time(pid) or 0)

    def is_local(self) -> bool:
        return self.host == socket.gethostname() and self.boot == boot_id()

    def is_alive(self) -> Optional[bool]:
        """False when the owner is known to be gone; None when it runs on another machine."""
        if self.host != socket.gethostname():
            return None
        if self.boot != boot_id():
            return False
        return process_alive(self.pid, self.start_time)

    def labels(self) -> dict[str, str]:
        """Container/service labels naming this owner."""
        return {
            MANAGED_LABEL: "1",
            LABEL_PREFIX + "owner.host": self.host,
            LABEL_PREFIX + "owner.boot": self.boot,
            LABEL_PREFIX + "owner.pid": str(self.pid),
            LABEL_PREFIX + "owner.start": str(self.start_time),
        }

    @classmethod
    def from_labels(cls, labels: dict[str, str]) -> Optional[Owner]:
        try:
            return cls(
                labels[LABEL_PREFIX + "owner.host"],
                labels[LABEL_PREFIX + "owner.boot"],
                int(labels[LABEL_PREFIX + "owner.pid"]),
                int(labels[LABEL_PREFIX + "owner.start"]),
            )
        except (KeyError, ValueError):
            return None

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}"


def state_dir() -> Path:
    """Where local resources are recorded: `$OPENENV_STATE_DIR`, else the user's state folder."""
    configured = settings.STATE_DIR.get()
    if configured:
        base = Path(configured)
    else:
        base = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
        base = base / "openenv"
    return base / "resources"


@dataclass
class LocalRecord:
    """A process tree started by a local provider (a plain process or a sandbox)."""

    id: str
    provider: str
    owner: Owner
    #: The process that leads the resource: its group holds every process it started.
    pid: int
    pid_start: Optional[int]
    created_at: float
    base_url: str = ""
    unix_socket: Optional[str] = None
    cgroup: Optional[list[str]] = None
    #: Folders to delete with the resource (socket folder, workspace).
    cleanup_paths: Optional[list[str]] = None
    target: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> LocalRecord:
        data = json.loads(text)
        data["owner"] = Owner(**data["owner"])
        return cls(**data)

    def path(self) -> Path:
        return state_dir() / f"{self.id}.json"

    def save(self) -> None:
        folder = state_dir()
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = folder / f".{self.id}.tmp"
        tmp.write_text(self.to_json())
        tmp.replace(self.path())

    def forget(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path().unlink()

    def running(self) -> bool:
        return process_alive(self.pid, self.pid_start)


def local_records() -> Iterator[LocalRecord]:
    folder = state_dir()
    if not folder.is_dir():
        return
    for path in sorted(folder.glob("*.json")):
        try:
            yield LocalRecord.from_json(path.read_text())
        except (OSError, ValueError, TypeError, KeyError):
            # Unreadable or half-written: not ours to judge; `openenv gc` reports it.
            continue


def kill_process_tree(
    pid: int, pid_start: Optional[int], cgroups: Optional[list[str]] = None, grace_s: float = 0.0
) -> None:
    """Stop a resource's processes: its process group (it leads its own session), then every
    process left in its cgroups. With `grace_s`, SIGTERM first and SIGKILL after the grace."""
    from openenv.isolation import cgroups as cg

    if process_alive(pid, pid_start):
        if grace_s > 0:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline and process_alive(pid, pid_start):
                time.sleep(0.02)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    for path in cgroups or ():
        cg.kill_and_remove(path)


def describe_record(record: LocalRecord) -> dict[str, Any]:
    alive = record.owner.is_alive()
    return {
        "id": record.id,
        "provider": record.provider,
        "target": record.target,
        "owner": record.owner.describe(),
        "owner_alive": alive,
        "running": record.running(),
        "created_at": record.created_at,
        "base_url": record.base_url or record.unix_socket or "",
    }
