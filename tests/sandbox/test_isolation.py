"""What a command can see and touch of the host: nothing under bubblewrap but the system (read
only), the server's interpreter and packages (read only) and its own workspace; under the
process backend, everything its user can (the documented weakness: the container around the
server is the boundary there)."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from openenv.sandbox import ExecStatus, Sandbox, WorkspacePathError
from tests.support.server import REPO

from .conftest import bubblewrap_problem

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def bwrap() -> Iterator[Sandbox]:
    if problem := bubblewrap_problem():
        pytest.skip(f"bubblewrap cannot run here: {problem}")
    with Sandbox(backend="bubblewrap") as box:
        yield box


def can(box: Sandbox, shell: str) -> bool:
    return box.run(["sh", "-c", shell]).status is ExecStatus.OK


def test_host_secrets_are_not_visible(bwrap: Sandbox) -> None:
    assert not can(bwrap, "cat /etc/shadow")
    assert not can(bwrap, "ls /etc/sudoers.d || ls /etc/ssh")
    if os.access("/root", os.R_OK):
        # Only the folders leading to the bound interpreter may exist there, and empty ones.
        for name in sorted(os.listdir("/root"))[:20]:
            if name != ".pyenv":
                assert not can(bwrap, f"test -e /root/{name}"), name
    assert bwrap.run(["env"]).stdout.count("\n") < 12  # a cleared environment


def test_the_server_source_tree_is_not_visible_beyond_its_packages(bwrap: Sandbox) -> None:
    """The interpreter and its import paths are bound read-only (so `box.python` works); the
    rest of the project (tests, .git, configuration, secrets in the checkout) is not there."""
    for hidden in ("pyproject.toml", ".git", "tests/sandbox/test_isolation.py", "uv.lock"):
        assert not can(bwrap, f"test -e {REPO / hidden}"), hidden
    sandbox_py = REPO / "src/openenv/sandbox/sandbox.py"
    if sandbox_py.exists():  # an editable install: the package source is an import path
        assert can(bwrap, f"test -r {sandbox_py}")
        assert not can(bwrap, f"echo x >> {sandbox_py}")
        assert not can(bwrap, f"touch {sandbox_py.parent}/planted.py")
    assert not (sandbox_py.parent / "planted.py").exists()


def test_another_sandboxs_workspace_is_not_visible(bwrap: Sandbox) -> None:
    with Sandbox(backend="bubblewrap") as other:
        other.write_file("secret.txt", "other's")
        assert not can(bwrap, f"cat {other.host_workspace}/secret.txt")
        assert not can(bwrap, f"ls {other.host_workspace}")
        assert bwrap.run(["ls", "-A", bwrap.workspace]).stdout == ""


def test_writes_outside_the_workspace_fail_or_stay_inside(bwrap: Sandbox, tmp_path: Path) -> None:
    token = f"openenv-planted-{os.urandom(4).hex()}"
    for target in (f"/usr/{token}", f"/etc/{token}", f"/{token}", f"{tmp_path}/{token}"):
        assert not can(bwrap, f"echo x > {target}"), target
        assert not os.path.exists(target), target
    assert can(bwrap, f"echo x > /tmp/{token}")  # a private /tmp ...
    assert not os.path.exists(f"/tmp/{token}")  # ... not the host's
    assert can(bwrap, f"echo x > {token}")  # the workspace is writable
    assert bwrap.read_file(token) == b"x\n"


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A TCP server on the host's loopback, accepting nothing yet."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    yield server
    server.close()


CONNECT = (
    "import socket, sys\n"
    "try:\n"
    "    socket.create_connection(('127.0.0.1', {port}), timeout=10).sendall(b'hi')\n"
    "except OSError as exc:\n"
    "    sys.exit(f'no connection: {{exc}}')\n"
    "print('connected')"
)


def test_no_network_under_bubblewrap(bwrap: Sandbox, listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    result = bwrap.run([bwrap.python, "-c", CONNECT.format(port=port)])
    assert result.status is ExecStatus.ERROR and "no connection" in result.stderr, result
    with pytest.raises(BlockingIOError):
        listener.accept()  # nothing reached the host
    dns = bwrap.run([bwrap.python, "-c", "import socket; socket.getaddrinfo('pypi.org', 443)"])
    assert dns.status is ExecStatus.ERROR


def test_network_true_shares_the_hosts_network(listener: socket.socket) -> None:
    if problem := bubblewrap_problem():
        pytest.skip(f"bubblewrap cannot run here: {problem}")
    from openenv.sandbox import SandboxLimits

    with Sandbox(backend="bubblewrap", limits=SandboxLimits(network=True)) as box:
        port = listener.getsockname()[1]
        result = box.run([box.python, "-c", CONNECT.format(port=port)])
    assert result.stdout == "connected\n", result


def test_the_process_backend_does_not_isolate_files_or_network(
    listener: socket.socket, tmp_path: Path
) -> None:
    """The documented weakness, pinned so a change to it is noticed (docs/sandbox.md)."""
    (tmp_path / "host-file").write_text("visible")
    with Sandbox(backend="process") as box:
        assert box.run(["cat", str(tmp_path / "host-file")]).stdout == "visible"
        port = listener.getsockname()[1]
        assert box.run([box.python, "-c", CONNECT.format(port=port)]).stdout == "connected\n"


@pytest.mark.parametrize("backend", ["bubblewrap", "process"])
def test_symlinks_and_dotdot_cannot_lead_the_server_out(backend: str, tmp_path: Path) -> None:
    if backend == "bubblewrap" and (problem := bubblewrap_problem()):
        pytest.skip(f"bubblewrap cannot run here: {problem}")
    outside = tmp_path / "outside.txt"
    outside.write_text("host data")
    with Sandbox(backend=backend) as box:
        made = box.run(
            [
                "sh",
                "-c",
                f"ln -s {outside} out; ln -s {tmp_path} dir; ln -s /etc/passwd pw; "
                "mkfifo fifo; mkdir real; echo inside > real/file; ln -s real/file ok",
            ]
        )
        assert made.status is ExecStatus.OK, made
        for escape in ("out", "dir/outside.txt", "pw", "../x", "/etc/passwd", "real/../../x"):
            with pytest.raises(WorkspacePathError):
                box.host_path(escape)
            with pytest.raises(WorkspacePathError):
                box.read_file(escape)
            with pytest.raises(WorkspacePathError):
                box.write_file(escape, "planted")
        with pytest.raises(WorkspacePathError):
            box.read_file("fifo")  # would block the server's thread forever
        assert box.read_file("ok") == b"inside\n"  # a symlink inside the workspace is fine
        assert box.read_file(f"{box.workspace}/real/file") == b"inside\n"
        with pytest.raises(WorkspacePathError):
            box.run(["true"], cwd="../")
        assert outside.read_text() == "host data"


def test_a_folder_swapped_for_a_symlink_is_not_followed(tmp_path: Path) -> None:
    """`write_file` walks the path without following symlinks, so a command that replaces a
    folder by a symlink between the check and the write cannot redirect the server's write."""
    with Sandbox(backend="process") as box:
        box.write_file("sub/file.txt", "first")
        real_host_path = box.host_path
        (tmp_path / "file.txt").write_text("host")

        def checked_then_swapped(relative: Any) -> Path:
            path = real_host_path(relative)
            (box.host_workspace / "sub/file.txt").unlink()
            (box.host_workspace / "sub").rmdir()
            (box.host_workspace / "sub").symlink_to(tmp_path)
            return path

        box.host_path = checked_then_swapped  # type: ignore[method-assign]
        with pytest.raises(WorkspacePathError):
            box.write_file("sub/file.txt", "planted")
    assert (tmp_path / "file.txt").read_text() == "host"
