"""Per-environment confinement, entered by a fork-server child inside the sandbox.

The sandbox provider runs its fork server inside bubblewrap (`openenv.providers.sandbox`, with
`bubblewrap.py`). Every environment the fork server forks then gets namespaces of its own before
any environment code runs:

- mount namespace: a private tmpfs on /tmp and on the workspace, an empty read-only tmpfs over
  the folder holding the sandbox's sockets and logs, and a /proc for its own PID namespace;
- PID namespace: it sees and can signal only its own processes; when its first process dies,
  the kernel kills every other one;
- network namespace (policy "none"): loopback only, nothing else reachable;
- IPC and cgroup namespaces;
- a user namespace of its own, entered after dropping to the sandbox user, and then no
  capabilities at all (empty bounding set, no-new-privileges).

Process layout: the fork server's child (which leads the process group and the cgroup) waits
for the namespace's init, which reaps orphans and mounts /proc; the server is init's child. The
three are Python forks sharing the fork server's pages.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import fcntl
import os
import signal
import socket
import struct
from collections.abc import Callable
from typing import Any

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 0x4000
MS_PRIVATE = 1 << 18

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_RAISE = 2
PR_CAP_AMBIENT_CLEAR_ALL = 4

_LINUX_CAPABILITY_VERSION_3 = 0x20080522

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


class IsolationError(OSError):
    """A confinement step failed; the environment must not start unconfined."""


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise IsolationError(err, f"{what}: {os.strerror(err)}")


def unshare(flags: int) -> None:
    _check(_libc.unshare(ctypes.c_int(flags)), f"unshare({flags:#x})")


def mount(source: str, target: str, fstype: str, flags: int = 0, data: str = "") -> None:
    _check(
        _libc.mount(
            source.encode(),
            target.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {fstype or source} on {target}",
    )


def _prctl(option: int, arg: int = 0, arg2: int = 0) -> None:
    _check(
        _libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), ctypes.c_ulong(arg2), 0, 0),
        f"prctl({option})",
    )


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def drop_capabilities() -> None:
    """No capability left in any set, none obtainable again (bounding set, no-new-privs)."""
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    for cap in range(_cap_last() + 1):
        _prctl(PR_CAPBSET_DROP, cap)
    with contextlib.suppress(IsolationError):  # kernels before 4.3 have no ambient set
        _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "capset")


def loopback_up() -> None:
    """A new network namespace starts with `lo` down; environments may use localhost."""
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(sock, siocgifflags, request))[1]
        fcntl.ioctl(sock, siocsifflags, struct.pack("16sH22x", b"lo", flags | iff_up))


def _write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


def _close_inherited(keep: tuple[int, ...] = ()) -> None:
    """Close every descriptor but stdio and `keep`: the fork server's pipe to the trainer
    must not reach environment code."""
    low = 3
    for fd in sorted(set(keep)):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, os.sysconf("SC_OPEN_MAX"))


def _wait_for(pid: int) -> int:
    """Reap children until `pid` exits; its exit code (128+signal when killed)."""
    while True:
        try:
            done, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return 1
        except InterruptedError:
            continue
        if done == pid:
            return os.waitstatus_to_exitcode(status) if status else 0


def lock_down() -> None:
    """Run by the sandbox's first process before any environment code is imported.

    bubblewrap made its mounts in the sandbox's user namespace, where the fork server holds
    capabilities: there it could remount a read-only bind writable or unmount a cover. So the
    fork server moves into a user and mount namespace of its own (same ids), where every one of
    those mounts is locked: read-only stays read-only, nothing can be unmounted. A fresh /proc
    (without bubblewrap's covers) is mounted first, so environments can still mount their own.
    """
    try:
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except IsolationError:
        # Unprivileged bubblewrap runs us in a nested user namespace that owns neither its
        # mounts nor its PID namespace: nothing to remount here, and its /proc has no covers.
        pass
    maps = {}
    for kind in ("uid_map", "gid_map"):
        lines = open(f"/proc/self/{kind}").read().split("\n")
        # The same ids inside as in the sandbox's namespace: "inside inside count".
        maps[kind] = "".join(
            f"{fields[0]} {fields[0]} {fields[2]}\n"
            for fields in (ln.split() for ln in lines)
            if fields
        )
    go_r, go_w = os.pipe()
    done_r, done_w = os.pipe()
    parent = os.getpid()
    helper = os.fork()
    if helper == 0:  # still in the sandbox's namespace, where it may write the maps
        code = 1
        try:
            os.close(go_w)
            os.close(done_r)
            if os.read(go_r, 1):
                for kind, text in maps.items():
                    _write(f"/proc/{parent}/{kind}", text)
                os.write(done_w, b"1")
                code = 0
        finally:
            os._exit(code)
    os.close(go_r)
    os.close(done_w)
    try:
        unshare(CLONE_NEWUSER | CLONE_NEWNS)
        os.write(go_w, b"1")
        if os.read(done_r, 1) != b"1":
            raise IsolationError(0, "could not map the fork server's user namespace")
    finally:
        os.close(go_w)
        os.close(done_r)
        os.waitpid(helper, 0)
    mount("none", "/", "", MS_REC | MS_PRIVATE)
    _keep_capabilities_across_exec()


def _keep_capabilities_across_exec() -> None:
    """A non-root user loses its capabilities at exec unless they are ambient."""
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.capget(ctypes.byref(header), data), "capget")
    for half in data:
        half.inheritable = half.permitted
    _check(_libc.capset(ctypes.byref(header), data), "capset")
    for cap in range(_cap_last() + 1):
        if data[cap // 32].permitted & (1 << (cap % 32)):
            _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap)


def _cap_last() -> int:
    try:
        return int(open("/proc/sys/kernel/cap_last_cap").read())
    except (OSError, ValueError):
        return 40


def enter(
    config: dict[str, Any], bind: Callable[[], socket.socket], keep_fds: tuple[int, ...] = ()
) -> socket.socket:
    """Confine the calling fork-server child; returns the server socket `bind` made.

    Every inherited descriptor but stdio, the socket and `keep_fds` is closed.

    Only the environment's server process returns; the two processes above it stay in here
    until the server exits, then exit with its code.
    """
    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS
    if config.get("network", "none") == "none":
        flags |= CLONE_NEWNET
    try:
        unshare(flags | CLONE_NEWCGROUP)
    except IsolationError:
        unshare(flags)  # kernels without cgroup namespaces
    mount("none", "/", "", MS_REC | MS_PRIVATE)
    if flags & CLONE_NEWNET:
        loopback_up()
    with contextlib.suppress(OSError):
        socket.sethostname(config.get("hostname") or "openenv")

    # The socket is made where the trainer can reach it, then every shared folder is hidden.
    sock = bind()
    for path in config.get("hide") or ():
        if os.path.isdir(path):
            mount("tmpfs", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k")
    uid, gid = config.get("uid"), config.get("gid")
    owner = f",uid={uid},gid={gid}" if uid is not None and gid is not None else ""
    tmp_size = config.get("tmp_size") or "256m"
    # Read-only folders bound under /tmp (a virtual environment there) are bound again on the
    # private /tmp, from descriptors opened before it covers them.
    kept = [(path, os.open(path, os.O_PATH)) for path in config.get("keep_under_tmp") or ()]
    mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={tmp_size}")
    for path, fd in kept:
        os.makedirs(path, exist_ok=True)
        mount(f"/proc/self/fd/{fd}", path, "", MS_BIND | MS_REC)
        mount("none", path, "", MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
        os.close(fd)
    workspace = config.get("workspace")
    if workspace:
        mount(
            "tmpfs", workspace, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=0700,size={tmp_size}{owner}"
        )

    init = os.fork()
    if init:  # the fork server's child: it leads the group; it lives as long as the namespace
        sock.close()
        _close_inherited()
        drop_capabilities()
        os._exit(_wait_for(init))

    # PID 1 of the new namespace.
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    server = os.fork()
    if server:
        sock.close()
        _close_inherited()
        drop_capabilities()
        os._exit(_wait_for(server))

    # The environment's server: the sandbox user, a user namespace of its own, no capabilities.
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if gid is not None and uid is not None and (os.getuid(), os.getgid()) != (uid, gid):
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
        # Changing uid makes the process undumpable, which would lock it out of /proc/self.
        _prctl(PR_SET_DUMPABLE, 1)
    real_uid, real_gid = os.getuid(), os.getgid()
    unshare(CLONE_NEWUSER)
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{real_uid} {real_uid} 1\n")
    _write("/proc/self/gid_map", f"{real_gid} {real_gid} 1\n")
    drop_capabilities()
    _close_inherited((sock.fileno(), *keep_fds))
    if workspace:
        os.environ["HOME"] = workspace
    os.environ["TMPDIR"] = "/tmp"
    return sock


if __name__ == "__main__":
    # python -m openenv.isolation.namespaces PROGRAM ARGS...: lock the sandbox down, then run.
    import sys

    lock_down()
    os.execv(sys.argv[1], sys.argv[1:])
