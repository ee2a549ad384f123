"""Listing and removing the process trees that local providers record under `state_dir()`.

The local, sandbox and uv providers start process trees, not engine objects, so nothing but
their `LocalRecord` files says what exists. These helpers turn records into `Resource`s for
`openenv ps` / `openenv gc` and remove one: kill its tree, delete its folders, forget it.
`LocalRecordResources` wires both into a provider class.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from pathlib import Path
from typing import ClassVar

from .base import ProviderError, Resource
from .ownership import (
    LocalRecord,
    boot_id,
    kill_process_tree,
    local_records,
    process_alive,
    process_start_time,
    state_dir,
)


def _leftovers(record: LocalRecord) -> list[int]:
    """Processes of the record's session still alive after its leader was killed.

    The leader led its own session, so the session id is its pid. The kernel does not reuse a
    pid while it still names a session, so once no process has that pid, every process in that
    session is ours, even when the leader itself is already gone (killed alone by SIGKILL).
    """
    if process_alive(record.pid, record.pid_start):
        return [record.pid]
    current = process_start_time(record.pid)
    if current is not None and current != record.pid_start:
        return []  # the pid now names an unrelated process: its session is not ours
    return session_members(record.pid)


def record_resource(record: LocalRecord) -> Resource:
    """One record as `openenv ps` shows it."""
    same_boot = record.owner.is_local()
    return Resource(
        id=record.id,
        provider=record.provider,
        target=record.target,
        owner=record.owner,
        owner_alive=record.owner.is_alive(),
        # A pid recorded before a reboot (or on another host) names nothing here.
        running=same_boot and record.pid > 0 and record.running(),
        created_at=record.created_at,
        address=record.unix_socket or record.base_url,
    )


def record_resources(provider: str) -> list[Resource]:
    """Every recorded resource of `provider` on this machine, whoever started it."""
    return [record_resource(r) for r in local_records() if r.provider == provider]


def load_record(resource_id: str) -> LocalRecord | None:
    """The record named `resource_id`, None when it is gone (already removed)."""
    path = state_dir() / f"{resource_id}.json"
    try:
        return LocalRecord.from_json(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise ProviderError(f"cannot read the record {path}: {exc}; delete it by hand") from None


def delete_paths(paths: list[str] | None) -> None:
    """Delete a resource's files and folders (sockets, logs, workspaces, clones)."""
    for raw in paths or ():
        path = Path(raw)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def remove_record(record: LocalRecord, *, grace_s: float = 0.0) -> None:
    """Kill the record's process tree, delete its paths, forget it; verified, not assumed.

    Records of another host are refused (their pids name nothing here). Records from before a
    reboot only have files left: their pids are not killed, as they may name new processes.
    """
    import socket

    if record.owner.host != socket.gethostname():
        raise ProviderError(
            f"{record.provider} {record.id} was started on {record.owner.host}; remove it there"
        )
    if record.owner.boot == boot_id() and record.pid > 0:
        kill_process_tree(record.pid, record.pid_start, record.cgroup, grace_s=grace_s)
        deadline = time.monotonic() + 5.0
        while True:
            left = _leftovers(record)
            if not left:
                break
            if time.monotonic() >= deadline:
                raise ProviderError(
                    f"{record.provider} {record.id}: processes {left} survived SIGKILL "
                    "(stuck in the kernel?); run `openenv gc` again later"
                )
            for pid in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)
    if record.owner.boot == boot_id():
        # A start that failed before its process existed may still have made its cgroups.
        from openenv.isolation import cgroups

        for folder in record.cgroup or ():
            cgroups.kill_and_remove(folder)
    delete_paths(record.cleanup_paths)
    record.forget()


def remove_record_resource(resource: Resource, *, grace_s: float = 0.0) -> None:
    """`Provider.remove_resource` for record-backed providers; a gone record is not an error."""
    record = load_record(resource.id)
    if record is not None:
        remove_record(record, grace_s=grace_s)


class LocalRecordResources:
    """Mixin: `resources()` / `remove_resource()` of a provider whose resources are records.

    Put it before `Provider` in the bases: `class UVProvider(LocalRecordResources, Provider)`.
    """

    name: ClassVar[str]

    @classmethod
    def resources(cls) -> list[Resource]:
        return record_resources(cls.name)

    @classmethod
    def remove_resource(cls, resource: Resource) -> None:
        remove_record_resource(resource)


def pid_session(pid: int) -> int | None:
    """The session id of `pid` (the pid of the process that led its session), None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[3])


def session_members(sid: int) -> list[int]:
    """Live processes of session `sid`: what a recorded tree still runs (zombies excluded)."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and pid_session(int(entry)) == sid and process_alive(int(entry), None):
            members.append(int(entry))
    return members
