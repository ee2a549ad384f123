"""A harness's long-lived child process, talked to by lines on stdin/stdout.

Reads happen on helper threads, so a read can be awaited from any event loop (the server's, or
the helper loop a sync `step()` runs on) and a cancelled read never loses a line. With a
`Sandbox`, the process runs inside it, and `stop()` kills everything it started there.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from typing import IO, Any, Optional

from .adapter import HarnessNotRunningError, HarnessStartupError

#: The most stderr kept between two `drain_stderr()` calls (the latest bytes).
STDERR_KEPT_BYTES = 64 * 1024


class _Lines:
    """Lines of a pipe, read on a daemon thread, awaitable from any loop."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._lines: collections.deque[str] = collections.deque()
        self._eof = False
        self._lock = threading.Lock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream: IO[bytes]) -> None:
        with contextlib.suppress(OSError, ValueError):
            for raw in iter(stream.readline, b""):
                with self._lock:
                    self._lines.append(raw.decode(errors="replace").rstrip("\r\n"))
                    self._wake()
        with self._lock:
            self._eof = True
            self._wake()

    def _wake(self) -> None:
        for loop, future in self._waiters:
            with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits
                loop.call_soon_threadsafe(_settle, future)
        self._waiters.clear()

    async def get(self, timeout_s: Optional[float]) -> Optional[str]:
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        while True:
            with self._lock:
                if self._lines:
                    return self._lines.popleft()
                if self._eof:
                    return None
                future: asyncio.Future[None] = loop.create_future()
                self._waiters.append((loop, future))
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                return None
            try:
                await asyncio.wait_for(future, remaining)
            except asyncio.TimeoutError:
                return None


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class _Tail:
    """The latest bytes of a pipe, read on a daemon thread (so the child never blocks on it)."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._chunks: collections.deque[bytes] = collections.deque()
        self._size = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream: IO[bytes]) -> None:
        with contextlib.suppress(OSError, ValueError):
            for chunk in iter(lambda: stream.read1(4096), b""):  # type: ignore[attr-defined]
                with self._lock:
                    self._chunks.append(chunk)
                    self._size += len(chunk)
                    while self._size > STDERR_KEPT_BYTES and len(self._chunks) > 1:
                        self._size -= len(self._chunks.popleft())

    def drain(self) -> str:
        with self._lock:
            data = b"".join(self._chunks)
            self._chunks.clear()
            self._size = 0
        return data[-STDERR_KEPT_BYTES:].decode(errors="replace")


class HarnessProcess:
    """One harness process: started by `start`, ended (with all it started) by `stop`.

    Without a sandbox it runs on the host in a session of its own (so its process group can be
    signalled as a whole), with `os.environ` plus `env_vars`. With `sandbox`, it runs inside it
    (`cwd` is a path inside the sandbox, `env_vars` are added to the sandbox's environment).
    """

    def __init__(
        self,
        command: list[str],
        cwd: str,
        env_vars: Optional[dict[str, str]] = None,
        startup_timeout_s: float = 30.0,
        terminate_grace_s: float = 5.0,
        *,
        sandbox: Any = None,
    ) -> None:
        if not command:
            raise ValueError("a harness process needs a command")
        self.command = list(command)
        self.cwd = cwd
        self.env_vars = dict(env_vars or {})
        self.startup_timeout_s = startup_timeout_s
        self.terminate_grace_s = terminate_grace_s
        self.sandbox = sandbox
        self._process: Optional[subprocess.Popen[bytes]] = None
        self._sandboxed: Any = None  # the SandboxProcess, when run in a sandbox
        self._stdout: Optional[_Lines] = None
        self._stderr: Optional[_Tail] = None
        self._write_lock = threading.Lock()

    @property
    def pid(self) -> Optional[int]:
        """The pid of the process started (under a sandbox: of its launcher)."""
        return self._process.pid if self._process is not None else None

    def _launch(self) -> None:
        if self.sandbox is not None:
            self._sandboxed = self.sandbox.spawn(self.command, env=self.env_vars, cwd=self.cwd)
            self._process = self._sandboxed.process
        else:
            self._process = subprocess.Popen(
                self.command,
                cwd=self.cwd,
                env={**os.environ, **self.env_vars},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        assert self._process.stdout is not None and self._process.stderr is not None
        self._stdout = _Lines(self._process.stdout)
        self._stderr = _Tail(self._process.stderr)

    async def start(self, ready_check: Optional[Callable[[str], bool]] = None) -> None:
        """Start the process; with `ready_check`, wait (up to `startup_timeout_s`) for a
        stdout line it accepts. Raises HarnessStartupError when it cannot start or never gets
        ready (the process is then stopped)."""
        if self.is_running():
            return
        try:
            await asyncio.to_thread(self._launch)
        except (OSError, subprocess.SubprocessError) as exc:
            raise HarnessStartupError(f"cannot start harness {self.command[0]!r}: {exc}") from exc
        if ready_check is None:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.startup_timeout_s
        while True:
            line = await self.read_line(timeout_s=max(0.0, deadline - loop.time()))
            if line is not None and ready_check(line):
                return
            if line is None:
                running = self.is_running()
                await self.stop()
                why = (
                    f"did not get ready within {self.startup_timeout_s:g}s"
                    if running
                    else "exited before it was ready"
                )
                stderr = self.drain_stderr().strip()
                raise HarnessStartupError(
                    f"harness {self.command[0]!r} {why}" + (f": {stderr[-2000:]}" if stderr else "")
                )

    def is_running(self) -> bool:
        if self._sandboxed is not None:
            return bool(self._sandboxed.alive())
        # Not `poll()`: reaping would free the pid that names its process group for `stop`.
        return self._process is not None and not _exited(self._process)

    async def write_line(self, text: str) -> None:
        """Send one line (a newline is added); raises HarnessNotRunningError if it is gone."""
        process = self._process
        if process is None or process.stdin is None or not self.is_running():
            raise HarnessNotRunningError("the harness process is not running")
        stdin = process.stdin
        data = (text.rstrip("\n") + "\n").encode()

        def write() -> None:
            with self._write_lock:
                stdin.write(data)
                stdin.flush()

        try:
            await asyncio.to_thread(write)
        except (BrokenPipeError, OSError, ValueError) as exc:
            raise HarnessNotRunningError(f"the harness process stopped reading: {exc}") from exc

    async def read_line(self, timeout_s: Optional[float] = None) -> Optional[str]:
        """The next stdout line, without its newline; None at end of output or on timeout."""
        if self._stdout is None:
            return None
        return await self._stdout.get(timeout_s)

    def drain_stderr(self) -> str:
        """What the process wrote to stderr since the last call (its latest 64 KiB)."""
        return self._stderr.drain() if self._stderr is not None else ""

    async def stop(self) -> None:
        """End the process and everything it started: SIGTERM to its process group, SIGKILL
        after `terminate_grace_s`. Idempotent."""
        process, sandboxed = self._process, self._sandboxed
        if process is None:
            return
        await asyncio.to_thread(self._terminate, process, sandboxed)

    def _terminate(self, process: subprocess.Popen[bytes], sandboxed: Any) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if process.returncode is None:
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.terminate_grace_s
        while time.monotonic() < deadline and not _exited(process):
            time.sleep(0.02)
        if sandboxed is not None:
            sandboxed.kill()  # the sandbox kills its whole tree and reaps
        else:
            # The leader is not reaped yet, so its pid (the group id) cannot be reused: the
            # SIGKILL reaches exactly what it left behind.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if process.returncode is None:
                    os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        for pipe in (process.stdin, process.stdout, process.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError, ValueError):
                    pipe.close()


def _exited(process: subprocess.Popen[bytes]) -> bool:
    """Whether the process ended, without reaping it."""
    if process.returncode is not None:
        return True
    try:
        info = os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None
