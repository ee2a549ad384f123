"""When bubblewrap is installed but refused user namespaces, the error says what refuses them
and names a fix that exists here: container settings inside a container, a sysctl only when
the kernel has that switch, never "install bubblewrap".

The refusal is a real `bwrap` on PATH that fails as Debian's does when namespaces are refused;
the container and the kernel's switches are a fake filesystem root and /proc."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from openenv import _userns
from openenv.sandbox import SandboxUnavailableError, choose_backend
from openenv.sandbox import sandbox as sandbox_module

REFUSED = (
    "bwrap: No permissions to create new namespace, likely because the kernel does not allow "
    "non-privileged user namespaces."
)


@pytest.fixture
def refused_bwrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A `bwrap` first on PATH that is refused its namespaces; returns a fake `/` whose
    `proc` folder stands for /proc."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    bwrap = bin_dir / "bwrap"
    bwrap.write_text(f"#!/bin/sh\necho '{REFUSED}' >&2\nexit 1\n")
    bwrap.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("container", raising=False)
    root = tmp_path / "root"
    (root / "proc" / "1").mkdir(parents=True)
    (root / "proc" / "1" / "cgroup").write_text("0::/user.slice/user-1000.slice\n")
    monkeypatch.setattr(_userns, "ROOT", root)
    monkeypatch.setattr(_userns, "PROC", root / "proc")
    sandbox_module.bubblewrap_problem.cache_clear()
    yield root
    sandbox_module.bubblewrap_problem.cache_clear()


def problem() -> str:
    with pytest.raises(SandboxUnavailableError) as caught:
        choose_backend("bubblewrap")
    return str(caught.value)


def sysctl(root: Path, name: str, value: str) -> None:
    path = root / "proc" / "sys" / name.replace(".", "/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(value + "\n")


def test_inside_docker_the_hint_is_the_container_settings(refused_bwrap: Path) -> None:
    (refused_bwrap / ".dockerenv").write_text("")
    message = problem()
    assert "No permissions to create new namespace" in message
    assert "inside Docker" in message
    assert "--security-opt seccomp=unconfined --security-opt systempaths=unconfined" in message
    assert "--privileged" in message
    assert "apt-get install" not in message and "sysctl" not in message


def test_a_container_is_also_known_by_its_cgroup(refused_bwrap: Path) -> None:
    (refused_bwrap / "proc" / "1" / "cgroup").write_text("0::/kubepods/besteffort/pod1/abc\n")
    assert "inside a container" in problem()


def test_the_sysctl_is_named_only_where_the_kernel_has_it(refused_bwrap: Path) -> None:
    message = problem()
    assert "sysctl" not in message and "apt-get install" not in message
    assert "refuses unprivileged user namespaces" in message
    sandbox_module.bubblewrap_problem.cache_clear()
    sysctl(refused_bwrap, "kernel.unprivileged_userns_clone", "0")
    assert "sysctl -w kernel.unprivileged_userns_clone=1" in problem()


def test_ubuntus_apparmor_switch(refused_bwrap: Path) -> None:
    sysctl(refused_bwrap, "kernel.apparmor_restrict_unprivileged_userns", "1")
    sysctl(refused_bwrap, "kernel.unprivileged_userns_clone", "1")  # on: not the cause
    message = problem()
    assert "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0" in message
    assert "unprivileged_userns_clone" not in message


def test_without_bwrap_the_hint_is_to_install_it(
    refused_bwrap: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(refused_bwrap / "empty"))
    assert "apt-get install bubblewrap" in problem()
