"""Why bubblewrap cannot create user namespaces here, and the setting that would let it.

bubblewrap is often installed and still refused: inside a container (Docker's default seccomp
profile refuses the namespaces and its masked `/proc` refuses a new proc mount), or on a host
whose kernel or security policy turns unprivileged user namespaces off. Each has its own fix,
and a `sysctl` that does not exist on the running kernel is no fix, so a switch is only named
when the kernel has it. Checked with bubblewrap 0.8 in Docker 20.10 (cgroup v1, no AppArmor):
`--security-opt seccomp=unconfined --security-opt systempaths=unconfined` is enough, either
alone is not, and `--cap-add SYS_ADMIN` does not help.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

#: The filesystem root and proc looked at (tests point them elsewhere).
ROOT = Path("/")
PROC = Path("/proc")

#: `docker run` options under which bubblewrap works inside the container.
DOCKER_OPTIONS = "--security-opt seccomp=unconfined --security-opt systempaths=unconfined"

_CONTAINER_MARKERS = ("docker", "containerd", "kubepods", "libpod", "lxc", "podman")


def container_kind() -> Optional[str]:
    """'Docker', 'Podman', 'a container' (seen in its cgroup or `$container`), or None."""
    root, proc = ROOT, PROC
    if (root / ".dockerenv").exists():
        return "Docker"
    if (root / "run" / ".containerenv").exists():
        return "Podman"
    try:
        cgroup = (proc / "1" / "cgroup").read_text(errors="replace")
    except OSError:
        cgroup = ""
    if any(marker in cgroup for marker in _CONTAINER_MARKERS) or os.environ.get("container"):
        return "a container"
    return None


def _read(path: Path) -> Optional[str]:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def kernel_switches() -> list[str]:
    """The sysctls that refuse unprivileged user namespaces on this kernel, as commands that
    allow them; only switches that exist here and are off."""
    proc = PROC
    fixes = []
    if _read(proc / "sys" / "kernel" / "unprivileged_userns_clone") == "0":
        fixes.append("sysctl -w kernel.unprivileged_userns_clone=1")
    if _read(proc / "sys" / "kernel" / "apparmor_restrict_unprivileged_userns") == "1":
        fixes.append(
            "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 (or an AppArmor profile "
            "that allows bwrap userns)"
        )
    if _read(proc / "sys" / "user" / "max_user_namespaces") == "0":
        fixes.append("sysctl -w user.max_user_namespaces=10000")
    return fixes


def namespace_advice() -> str:
    """What lets bwrap (installed, but refused namespaces) work here, as a clause."""
    switches = kernel_switches()
    kind = container_kind()
    if kind is not None:
        advice = (
            f"this runs inside {kind}, whose default seccomp profile and masked /proc refuse "
            f"them: start the container with `{DOCKER_OPTIONS}` (and `--security-opt "
            "apparmor=unconfined` where AppArmor confines containers), or `--privileged`"
        )
        if switches:
            advice += f"; and on the host: {'; '.join(switches)}"
        return advice
    if switches:
        return "allow unprivileged user namespaces: " + "; ".join(switches)
    return (
        "the kernel or a security policy (seccomp, SELinux, a hardened kernel) refuses "
        "unprivileged user namespaces to this user; allow them, or run as a user that has them"
    )
