"""bubblewrap: whether it can confine processes here, and the pieces of its command lines.

The sandbox provider runs each fork server in one bubblewrap sandbox and the command sandbox
(`openenv.sandbox`) runs each command in one; both build the sandbox's root filesystem with
`BwrapMounts` (the system read-only, then `bound_paths`), run a root caller's sandboxes in the
user namespace `root_userns` makes, and run as `SANDBOX_UID` when the caller is root.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Optional

from openenv.core.errors import ProviderUnavailableError

#: The user sandboxed code runs as when the caller is root (never root itself).
SANDBOX_UID = 65534
SANDBOX_GID = 65534

INSTALL_HINT = "install bubblewrap (`apt-get install bubblewrap`)"

#: /etc entries programs need to run (users, name resolution, TLS roots, time zone, linker).
ETC_ENTRIES = (
    "passwd",
    "group",
    "hosts",
    "host.conf",
    "nsswitch.conf",
    "resolv.conf",
    "gai.conf",
    "protocols",
    "services",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "timezone",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "alternatives",
    "mime.types",
    "os-release",
)


@functools.cache
def bubblewrap_problem() -> Optional[str]:
    """None when bubblewrap can create the namespaces we need here; else why not (one line).

    Asked once per process (`bubblewrap_problem.cache_clear()` asks again)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return f"sandbox: bubblewrap (bwrap) is not installed; {INSTALL_HINT}"
    try:
        result = subprocess.run(
            [
                bwrap,
                "--unshare-user",
                "--unshare-pid",
                "--unshare-net",
                "--unshare-ipc",
                "--cap-add",
                "ALL",
                "--ro-bind",
                "/",
                "/",
                "--proc",
                "/proc",
                "--dev",
                "/dev",
                "true",
            ],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"sandbox: bwrap did not run ({exc}); {INSTALL_HINT}"
    if result.returncode != 0:
        reason = (result.stderr.strip().splitlines() or ["no output"])[-1]
        # bwrap is installed: what refuses it is the container or the kernel (openenv._userns).
        from openenv._userns import namespace_advice

        return f"sandbox: bwrap cannot create namespaces here ({reason}); {namespace_advice()}"
    return None


@functools.cache
def _python_paths(python: str, pythonpath: str) -> tuple[str, ...]:
    """Folders the interpreter imports from: its prefixes and its default sys.path
    (site-packages, editable installs, PYTHONPATH), to bind read-only. Asked of the interpreter
    itself, so the caller's script folder or working folder is not among them."""
    code = "import sys, json; print(json.dumps([sys.prefix, sys.base_prefix, *sys.path[1:]]))"
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": pythonpath}
    result = subprocess.run(
        [python, "-c", code], capture_output=True, text=True, env=env, cwd="/", check=True
    )
    paths = [p for p in json.loads(result.stdout) if p]
    paths.append(os.path.dirname(os.path.abspath(python)))
    paths.append(os.path.dirname(os.path.realpath(python)))
    return tuple(paths)


def _minimal(paths: list[str]) -> list[str]:
    """Existing paths (and their real paths), without those inside another one or in /usr."""
    found: set[str] = set()
    for path in paths:
        for candidate in (os.path.abspath(path), os.path.realpath(path)):
            if os.path.exists(candidate):
                found.add(candidate)
    kept: list[str] = []
    for path in sorted(found, key=len):
        inside = ("/usr", *kept)
        if path == "/" or any(path == k or path.startswith(k.rstrip("/") + "/") for k in inside):
            continue
        kept.append(path)
    return sorted(kept)


class BwrapMounts:
    """The mount options of a bubblewrap command line, appended to `argv` in order.

    bubblewrap creates a target's missing parent folders private (0700), so every parent is
    first made as a readable folder; `made` remembers what exists inside the sandbox."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self.made: set[str] = {"/"}

    def bind(self, option: str, source: str, target: Optional[str] = None) -> None:
        target = target or source
        parent = os.path.dirname(target)
        missing = []
        while parent not in self.made:
            missing.append(parent)
            parent = os.path.dirname(parent)
        for folder in reversed(missing):
            self.argv.extend(["--perms", "0755", "--dir", folder])
            self.made.add(folder)
        self.argv.extend([option, source, target])
        self.made.add(target)

    def system(self) -> None:
        """The host's programs and libraries read-only, and the /etc entries they need."""
        self.bind("--ro-bind", "/usr")
        for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
            if os.path.islink(top):
                self.argv += ["--symlink", os.readlink(top), top]
            elif os.path.isdir(top):
                self.bind("--ro-bind", top)
        for name in ETC_ENTRIES:
            self.bind("--ro-bind-try", f"/etc/{name}")


def bound_paths(python: str, root: Optional[Path], extra_ro: tuple[str, ...]) -> list[str]:
    """What a sandbox binds read-only besides the system: imports, environment, extras."""
    sources = [*_python_paths(python, os.environ.get("PYTHONPATH", "")), *extra_ro]
    if root is not None:
        sources.append(str(root))
    return _minimal(sources)


def root_userns() -> int:
    """For a root caller: a user namespace mapping root and the sandbox user only, as an fd.

    bubblewrap alone would map the sandbox's root to the host's root; with this namespace the
    sandbox's first process is root inside (to set it up) and what it runs switches to an
    unprivileged host user. `ProviderUnavailableError` when `unshare --user` cannot make it."""
    own = os.readlink("/proc/self/ns/user")
    helper = subprocess.Popen(
        ["unshare", "--user", "--", "cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 5.0
        while os.readlink(f"/proc/{helper.pid}/ns/user") == own:
            if helper.poll() is not None or time.monotonic() > deadline:
                raise ProviderUnavailableError(
                    "sandbox: `unshare --user` failed; install util-linux and allow user namespaces"
                )
            time.sleep(0.0005)
        mapping = f"0 0 1\n{SANDBOX_UID} {SANDBOX_UID} 1\n"
        Path(f"/proc/{helper.pid}/uid_map").write_text(mapping)
        Path(f"/proc/{helper.pid}/gid_map").write_text(f"0 0 1\n{SANDBOX_GID} {SANDBOX_GID} 1\n")
        return os.open(f"/proc/{helper.pid}/ns/user", os.O_RDONLY)
    finally:
        if helper.stdin:
            helper.stdin.close()
        helper.wait()
