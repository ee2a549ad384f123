"""One IPython kernel inside an `openenv.sandbox.Sandbox`, driven over ZeroMQ IPC sockets.

jupyter_client's `KernelManager` launches kernels with a plain Popen; here the kernel runs model
code, so it is started with `Sandbox.spawn` (namespaces, cgroup or rlimits, the user nobody) and
only jupyter_client's client side is used. Under bubblewrap the network namespace is private, so
the channels are IPC socket files (`transport="ipc"`) in a server-owned folder bound into the
sandbox at the same path. That folder is not in the workspace: the model could rename a workspace
folder and put a symlink to some other host socket where the server connects. Once the kernel
listens, the folder is taken back (root-owned, read-only), so its sockets cannot be swapped.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import secrets
import shutil
import stat
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Optional

from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.connect import write_connection_file

from openenv.sandbox import Sandbox, SandboxError, SandboxProcess

#: MIME types kept from display data: what a text or multimodal agent can use.
KEPT_MIME_TYPES = (
    "text/plain",
    "text/html",
    "text/markdown",
    "text/latex",
    "image/png",
    "image/jpeg",
    "image/svg+xml",
    "application/json",
)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_POLL_S = 0.1
_BANNER = re.compile(r"To connect another client|--existing ")

# Run silently by `soft_reset`: a new episode in the same process, well under a second.
_SOFT_RESET = """\
def _openenv_soft_reset(ip=get_ipython()):
    import os, sys
    ip.reset(new_session=False)  # the namespace, this function's name included
    if 'matplotlib.pyplot' in sys.modules:
        sys.modules['matplotlib.pyplot'].close('all')
    os.chdir({workspace!r})
    ip.execution_count = 1
_openenv_soft_reset()
"""
# What still runs besides the kernel's own threads: anything left means a fresh process.
_BUSY_PROBE = {
    "threads": "__import__('threading').active_count()",
    "children": "len(__import__('psutil').Process().children(recursive=True))",
}


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


@dataclass
class CellRun:
    """What one cell did: nbformat-shaped outputs, its error, and how it ended.

    `status`: ok, error (the cell raised), timeout (interrupted; variables kept) or restarted
    (the kernel died or ignored the interrupt and was restarted; variables lost)."""

    status: str
    outputs: list[dict[str, Any]] = field(default_factory=list)
    error: Optional[dict[str, Any]] = None
    execution_count: Optional[int] = None
    message: str = ""
    duration_s: float = 0.0


class _KernelDied(Exception):
    pass


class _Outputs:
    """Gathers a cell's IOPub messages into nbformat outputs, within a size budget."""

    def __init__(self, max_chars: int) -> None:
        self.outputs: list[dict[str, Any]] = []
        self.error: Optional[dict[str, Any]] = None
        self.truncated = False
        self._room = max_chars
        self._clear_on_next = False
        self._by_display_id: dict[str, dict[str, Any]] = {}

    def add(self, kind: str, content: dict[str, Any]) -> None:
        if kind == "clear_output":
            if content.get("wait"):
                self._clear_on_next = True
            else:
                self._clear()
            return
        if kind not in ("stream", "display_data", "execute_result", "update_display_data", "error"):
            return
        if self._clear_on_next and kind != "update_display_data":
            self._clear()
        if kind == "stream":
            self._stream(content.get("name", "stdout"), str(content.get("text", "")))
        elif kind == "error":
            self.error = {
                "ename": str(content.get("ename", "")),
                "evalue": str(content.get("evalue", "")),
                "traceback": [strip_ansi(str(line)) for line in content.get("traceback", [])],
            }
            self.outputs.append({"output_type": "error", **self.error})
        else:
            self._display(kind, content)

    def _clear(self) -> None:
        self.outputs.clear()
        self._by_display_id.clear()
        self._clear_on_next = False

    def _take(self, text: str) -> str:
        if len(text) > self._room:
            text, self.truncated = text[: self._room], True
        self._room -= len(text)
        return text

    def _stream(self, name: str, text: str) -> None:
        text = self._take(text)
        if not text:
            return
        last = self.outputs[-1] if self.outputs else None
        if last is not None and last["output_type"] == "stream" and last["name"] == name:
            last["text"] += text
        else:
            self.outputs.append({"output_type": "stream", "name": name, "text": text})

    def _display(self, kind: str, content: dict[str, Any]) -> None:
        data: dict[str, Any] = {}
        for mime, value in (content.get("data") or {}).items():
            if mime not in KEPT_MIME_TYPES:
                continue
            size = len(value) if isinstance(value, str) else len(json.dumps(value))
            if size > self._room:
                self.truncated = True
                continue
            self._room -= size
            data[mime] = value
        if not data:
            return
        display_id = (content.get("transient") or {}).get("display_id")
        if kind == "update_display_data":
            shown = self._by_display_id.get(display_id) if display_id else None
            if shown is not None:
                shown["data"], shown["metadata"] = data, content.get("metadata") or {}
            return
        output: dict[str, Any] = {
            "output_type": kind,
            "data": data,
            "metadata": content.get("metadata") or {},
        }
        if kind == "execute_result":
            output["execution_count"] = content.get("execution_count")
        self.outputs.append(output)
        if display_id:
            self._by_display_id[display_id] = output


class SandboxedKernel:
    """An IPython kernel in `sandbox`: start, execute cells, interrupt, restart, close.

    Not thread-safe: one session drives it at a time. Every failure to (re)start the kernel is
    a `SandboxError` (infrastructure), never a cell result."""

    def __init__(
        self,
        sandbox: Sandbox,
        *,
        start_timeout_s: float = 60.0,
        interrupt_grace_s: float = 3.0,
        max_output_chars: int = 1_000_000,
    ) -> None:
        self.sandbox = sandbox
        self.start_timeout_s = start_timeout_s
        self.interrupt_grace_s = interrupt_grace_s
        self.max_output_chars = max_output_chars
        self.restarts = 0
        self._process: Optional[SandboxProcess] = None
        self._client: Optional[BlockingKernelClient] = None
        self._stderr_tail: deque[bytes] = deque(maxlen=64)
        self._baseline_threads = 0
        self._starting: Optional[threading.Thread] = None
        self._start_error: Optional[BaseException] = None
        # Server-owned: `ipc/` (locked once the kernel listens) and `home/` (IPython and
        # matplotlib state, kept across episodes so the font cache is built once).
        self._dir = Path(tempfile.mkdtemp(prefix="openenv-kernel-"))
        os.chmod(self._dir, 0o755)

    # -- lifecycle -------------------------------------------------------------------------

    def alive(self) -> bool:
        return self._process is not None and self._process.alive()

    def start_soon(self) -> None:
        """Start a kernel in the background: an agent usually thinks before its first cell.
        The next call that needs the kernel waits for it (and raises what the start raised)."""
        if self._process is not None or self._starting is not None:
            return

        def start() -> None:
            try:
                self.start()
            except BaseException as exc:
                self._start_error = exc

        self._starting = threading.Thread(target=start, name="kernel-start", daemon=True)
        self._starting.start()

    def _settle(self, *, raise_error: bool = True) -> None:
        """Wait for a background start, if one is under way."""
        thread = self._starting
        if thread is None or thread is threading.current_thread():
            return
        thread.join()
        self._starting = None
        error, self._start_error = self._start_error, None
        if error is not None and raise_error:
            raise error

    def start(self) -> None:
        """Start a new kernel (killing any previous one) and wait until it answers."""
        self._settle(raise_error=False)
        self.stop()
        ipc, home = self._dir / "ipc", self._dir / "home"
        if ipc.exists():
            _unlock(ipc)
            shutil.rmtree(ipc)
        for folder in (ipc, home):
            folder.mkdir(exist_ok=True)
            self.sandbox.give_to_sandbox_user(folder)
        connection_file = ipc / "kernel.json"
        _, info = write_connection_file(
            str(connection_file),
            transport="ipc",
            ip=str(ipc / "k"),
            key=secrets.token_hex(32).encode(),
            shell_port=1,
            iopub_port=2,
            stdin_port=3,
            control_port=4,
            hb_port=5,
        )
        self.sandbox.give_to_sandbox_user(connection_file)
        argv = [
            self.sandbox.python,
            "-m",
            "ipykernel_launcher",
            "-f",
            str(connection_file),
            "--HistoryManager.enabled=False",
        ]
        env = {
            "IPYTHONDIR": str(home / "ipython"),
            "MPLCONFIGDIR": str(home / "matplotlib"),
            "MPLBACKEND": "module://matplotlib_inline.backend_inline",
            "JUPYTER_PLATFORM_DIRS": "1",
            # Nothing of the kernel's own in the workspace, which is cleared between episodes.
            "JUPYTER_CONFIG_DIR": str(home / "jupyter"),
            "JUPYTER_DATA_DIR": str(home / "jupyter"),
            "JUPYTER_RUNTIME_DIR": str(home / "jupyter" / "runtime"),
            "PYDEVD_DISABLE_FILE_VALIDATION": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
        }
        try:
            self._process = self.sandbox.spawn(argv, env=env, binds=[self._dir])
        except OSError as exc:
            raise SandboxError(f"could not start the kernel: {exc}") from exc
        self._stderr_tail.clear()
        for pipe in (self._process.stdout, self._process.stderr):
            threading.Thread(target=self._drain, args=(pipe,), daemon=True).start()
        client = BlockingKernelClient()
        client.load_connection_info(info)
        client.start_channels(shell=True, iopub=True, stdin=False, hb=False, control=True)
        self._client = client
        try:
            self._wait_ready()
        except _KernelDied as exc:
            self.stop()
            raise SandboxError(f"the kernel did not start: {exc}") from exc
        with contextlib.suppress(OSError):
            connection_file.unlink()  # the key stays in the client only
        _lock(ipc)
        self._baseline_threads = self._probe().get("threads", 0)

    def restart(self) -> None:
        self._settle(raise_error=False)
        self.restarts += 1
        self.start()

    def soft_reset(self) -> bool:
        """Clear the namespace of the running kernel for a new episode. False when that was
        not enough (no kernel, a stray thread or process left running): then `start` anew."""
        self._settle(raise_error=False)
        if not self.alive():
            return False
        code = _SOFT_RESET.format(workspace=self.sandbox.workspace)
        try:
            reply = self._run_silently(code, _BUSY_PROBE)
        except (_KernelDied, TimeoutError):
            return False
        if reply.get("status") != "ok":
            return False
        found = _probe_values(reply)
        return found.get("children") == 0 and found.get("threads") == self._baseline_threads

    def close(self) -> None:
        """Kill the kernel and delete its sockets and state (the workspace is the sandbox's)."""
        self._settle(raise_error=False)
        self.stop()
        if self._dir.exists():
            for folder in (self._dir, *self._dir.iterdir()):
                _unlock(folder)
            shutil.rmtree(self._dir, ignore_errors=True)

    def stop(self) -> None:
        """Kill the kernel; the next cell starts a new one."""
        self._settle(raise_error=False)
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.stop_channels()
            self._client = None
        if self._process is not None:
            self._process.kill()
            self._process = None

    # -- cells -----------------------------------------------------------------------------

    def execute(self, code: str, timeout_s: float) -> CellRun:
        """Run one cell. Past `timeout_s` it is interrupted; a kernel that then stays busy, or
        that dies, is restarted (the result says so)."""
        self._settle()
        notice = ""
        if self._process is None:
            self.start()
        elif not self.alive():
            self.restart()
            notice = "the kernel had died and was restarted before this cell; variables are lost"
        client = self._require_client()
        started = time.monotonic()
        msg_id = client.execute(code, store_history=True, allow_stdin=False, stop_on_error=True)
        outputs = _Outputs(self.max_output_chars)
        try:
            finished = self._collect(msg_id, outputs, started + timeout_s)
            if not finished:
                self._interrupt()
                finished = self._collect(msg_id, outputs, time.monotonic() + self.interrupt_grace_s)
                if not finished:
                    self.restart()
                    return self._result(
                        "restarted",
                        outputs,
                        started,
                        f"the cell ran past {timeout_s:g} s and did not stop when interrupted: "
                        "the kernel was restarted and its variables are lost",
                    )
                reply = self._shell_reply(msg_id, self.interrupt_grace_s)
                return self._result(
                    "timeout",
                    outputs,
                    started,
                    f"the cell ran past {timeout_s:g} s and was interrupted "
                    "(KeyboardInterrupt); the kernel and its variables are kept",
                    reply,
                )
            reply = self._shell_reply(msg_id, self.interrupt_grace_s)
        except _KernelDied as exc:
            self.restart()
            return self._result(
                "restarted",
                outputs,
                started,
                f"the kernel died during the cell ({exc}) and was restarted; variables are lost",
            )
        status = "error" if outputs.error or reply.get("status") == "error" else "ok"
        return self._result(status, outputs, started, notice, reply)

    def _result(
        self,
        status: str,
        outputs: _Outputs,
        started: float,
        message: str,
        reply: Optional[dict[str, Any]] = None,
    ) -> CellRun:
        if outputs.truncated:
            note = f"outputs past {self.max_output_chars} characters were dropped"
            message = f"{message}; {note}" if message else note
        count = (reply or {}).get("execution_count")
        return CellRun(
            status=status,
            outputs=outputs.outputs,
            error=outputs.error,
            execution_count=count if isinstance(count, int) else None,
            message=message,
            duration_s=round(time.monotonic() - started, 4),
        )

    def _collect(self, msg_id: str, outputs: _Outputs, deadline: float) -> bool:
        """Feed the cell's IOPub messages to `outputs` until it is idle (True) or the
        deadline passes (False)."""
        client = self._require_client()
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            try:
                msg = client.get_iopub_msg(timeout=min(_POLL_S, remaining))
            except queue.Empty:
                self._check_alive()
                continue
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg.get("content", {})
            if kind == "status" and content.get("execution_state") == "idle":
                return True
            outputs.add(kind, content)

    def _shell_reply(self, msg_id: str, timeout_s: float) -> dict[str, Any]:
        client = self._require_client()
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return {}
            try:
                msg = client.get_shell_msg(timeout=min(_POLL_S, remaining))
            except queue.Empty:
                self._check_alive()
                continue
            if msg.get("parent_header", {}).get("msg_id") == msg_id:
                return dict(msg.get("content", {}))

    def _interrupt(self) -> None:
        """Ask the kernel to SIGINT itself (its control thread answers even while a cell runs;
        the sandbox's process tree cannot be signalled from outside under bubblewrap)."""
        client = self._require_client()
        client.control_channel.send(client.session.msg("interrupt_request", {}))

    def _run_silently(self, code: str, expressions: dict[str, str]) -> dict[str, Any]:
        client = self._require_client()
        msg_id = client.execute(
            code, silent=True, store_history=False, user_expressions=expressions
        )
        if not self._collect(msg_id, _Outputs(0), time.monotonic() + 10):
            raise TimeoutError("the kernel did not finish a silent request")
        return self._shell_reply(msg_id, 10)

    def _probe(self) -> dict[str, int]:
        try:
            return _probe_values(self._run_silently("", _BUSY_PROBE))
        except (_KernelDied, TimeoutError):
            return {}

    def _wait_ready(self) -> None:
        """Until the kernel answers kernel_info with its IOPub status seen here: only then are
        the IOPub messages of the first cell sure to arrive."""
        client = self._require_client()
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            msg_id = client.kernel_info()
            if self._collect(msg_id, _Outputs(0), min(deadline, time.monotonic() + 1.0)):
                self._shell_reply(msg_id, 5)
                return
        raise _KernelDied(f"no answer in {self.start_timeout_s:g} s{self._stderr_hint()}")

    def _check_alive(self) -> None:
        process = self._process
        if process is None or not process.alive():
            code = None if process is None else process.returncode
            raise _KernelDied(f"{_describe_exit(code)}{self._stderr_hint()}")

    def _require_client(self) -> BlockingKernelClient:
        if self._client is None:
            self.start()
        assert self._client is not None
        return self._client

    def _drain(self, pipe: IO[bytes]) -> None:
        """Read the kernel's own stdout/stderr (cell output goes over IOPub) so that a full
        pipe never blocks it; keep the tail for error messages."""
        with contextlib.suppress(OSError, ValueError):
            for line in iter(pipe.readline, b""):
                self._stderr_tail.append(line[-500:])

    def _stderr_hint(self) -> str:
        lines = [line.decode("utf-8", "replace").strip() for line in list(self._stderr_tail)[-3:]]
        lines = [line for line in lines if line and not _BANNER.search(line)]
        return f"; kernel said: {' | '.join(lines)}" if lines else ""


def _probe_values(reply: dict[str, Any]) -> dict[str, int]:
    found: dict[str, int] = {}
    for name, result in (reply.get("user_expressions") or {}).items():
        with contextlib.suppress(KeyError, TypeError, ValueError):
            found[name] = int(result["data"]["text/plain"])
    return found


def _describe_exit(code: Optional[int]) -> str:
    if code is None:
        return "it is gone"
    if code < 0 or code > 128:
        sig = -code if code < 0 else code - 128  # bubblewrap reports signal N as 128 + N
        hint = " (out of memory?)" if sig == 9 else ""
        return f"killed by signal {sig}{hint}"
    return f"it exited with status {code}"


def _lock(folder: Path) -> None:
    """Take a folder back from the sandbox user: no new, renamed or deleted entries."""
    if os.geteuid() == 0:
        os.chown(folder, 0, 0)
    os.chmod(folder, 0o555)


def _unlock(folder: Path) -> None:
    with contextlib.suppress(OSError):
        mode = folder.stat().st_mode
        if stat.S_ISDIR(mode):
            os.chmod(folder, 0o755)
