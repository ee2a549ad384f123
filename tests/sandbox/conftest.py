"""Sandboxes of every backend for the adversarial tests, and a look at the host's process table.

`backend_kind` runs a test under bubblewrap (skipped, with the reason, where bwrap cannot
create namespaces), under the process backend as this machine gives it (with a cgroup when one
is writable) and under the process backend with rlimits only (the cgroup made unavailable), the
weakest configuration, as inside an unprivileged container.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from openenv.isolation import cgroups
from openenv.sandbox import Sandbox, SandboxLimits, SandboxUnavailableError, choose_backend
from openenv.sandbox import sandbox as sandbox_module

KINDS = ("bubblewrap", "process", "process-rlimits")

#: Generous: a loaded 2-core machine can take seconds to start an interpreter.
WALL_S = 60.0


def bubblewrap_problem() -> str | None:
    try:
        choose_backend("bubblewrap")
    except SandboxUnavailableError as exc:
        return str(exc)
    return None


@pytest.fixture(params=KINDS)
def backend_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    kind: str = request.param
    if kind == "bubblewrap" and (problem := bubblewrap_problem()):
        pytest.skip(f"bubblewrap cannot run here: {problem}")
    if kind == "process-rlimits":
        monkeypatch.setattr(sandbox_module.cgroups, "create", lambda *a, **k: None)
    return kind


def has_cgroup(kind: str) -> bool:
    return kind != "process-rlimits" and cgroups.mode() is not None


@pytest.fixture
def make_box(backend_kind: str) -> Iterator[Any]:
    """`make_box(**limits)`: a sandbox of the test's backend, closed after the test."""
    boxes: list[Sandbox] = []

    def make(**limits: Any) -> Sandbox:
        limits.setdefault("wall_time_s", WALL_S)
        backend = "bubblewrap" if backend_kind == "bubblewrap" else "process"
        box = Sandbox(limits=SandboxLimits(**limits), backend=backend)
        boxes.append(box)
        return box

    yield make
    for box in boxes:
        box.close()


def processes_with(token: str) -> list[int]:
    """Host pids whose command line contains `token`."""
    found = []
    needle = token.encode()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"{entry.path}/cmdline", "rb") as handle:
                cmdline = handle.read()
            with open(f"{entry.path}/stat", "rb") as handle:
                state = handle.read().rpartition(b")")[2].split()[0]
        except OSError:
            continue
        if needle in cmdline and state != b"Z":
            found.append(int(entry.name))
    return found


def survivors(token: str, settle_s: float = 15.0) -> list[int]:
    """Processes with `token` still alive once the kill has had time to land (a bound for a
    loaded machine, not a timing assertion: it returns as soon as none is left)."""
    deadline = time.monotonic() + settle_s
    while (found := processes_with(token)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


def unique_sleep() -> tuple[str, str]:
    """A `sleep` duration no other process on the machine uses: (argument, token to look for)."""
    digits = str(int.from_bytes(os.urandom(4), "big"))
    return f"1000.{digits}", f"1000.{digits}"
