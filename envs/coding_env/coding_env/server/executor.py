"""Running a model's Python in the sandbox: one-shot processes, a persistent REPL, the judge.

All three run `_worker.py` (see its docstring for the frame protocol) under
`openenv.sandbox.Sandbox`; nothing the model wrote is ever executed in the server.
"""

from __future__ import annotations

import json
import os
import secrets
import selectors
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from openenv.sandbox import ExecResult, ExecStatus, Sandbox, SandboxError, SandboxProcess

WORKER_SOURCE = (Path(__file__).parent / "_worker.py").read_text()
#: Where the cells' output files live, relative to the workspace.
OUTPUT_DIR = ".openenv"
#: How long a new interpreter may take to say it is ready before that is an infrastructure error.
START_TIMEOUT_S = 30.0


@dataclass
class CellResult:
    """One execution of the model's code, however it ended."""

    status: ExecStatus
    exit_code: int
    stdout: str = ""
    stderr: str = ""
    exception: Optional[dict[str, str]] = None
    duration_s: float = 0.0
    truncated: bool = False
    message: str = ""
    #: The persistent interpreter ended with this cell (the next one starts afresh).
    interpreter_lost: bool = False


@dataclass
class CaseResult:
    """What one test call returned (JSON data) or why it did not; the server compares."""

    value: Any = None
    error: str = ""


@dataclass
class _Frames:
    """Parses `\\n<token> <length>\\n<json>` frames out of a byte stream."""

    token: bytes
    buffer: bytearray = field(default_factory=bytearray)

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        self.buffer += data
        found = []
        marker = b"\n" + self.token + b" "
        while True:
            start = self.buffer.find(marker)
            if start < 0:
                break
            header_end = self.buffer.find(b"\n", start + len(marker))
            if header_end < 0:
                break
            try:
                length = int(self.buffer[start + len(marker) : header_end])
            except ValueError:  # not a header after all
                del self.buffer[: start + len(marker)]
                continue
            if len(self.buffer) < header_end + 1 + length:
                break
            body = bytes(self.buffer[header_end + 1 : header_end + 1 + length])
            del self.buffer[: header_end + 1 + length]
            try:
                frame = json.loads(body)
            except ValueError:
                continue
            if isinstance(frame, dict):  # anything else is not the worker's
                found.append(frame)
        return found


def _worker_argv(box: Sandbox) -> list[str]:
    return [box.python, "-c", WORKER_SOURCE]


def _read_output(box: Sandbox, relative: str, cap: int) -> tuple[str, bool]:
    """A cell's output file, cut at `cap` bytes; then deleted."""
    try:
        path = box.host_path(relative)
        size = path.stat().st_size if path.is_file() and not path.is_symlink() else 0
        data = box.read_file(relative, max_bytes=cap) if size else b""
    except (OSError, ValueError):
        return "", False
    try:
        path.unlink()
    except OSError:
        pass
    return data.decode("utf-8", "replace"), size > cap


class Executor:
    """Runs cells for one session: each in a fresh process, or all in one persistent REPL.

    With `warm`, a spare interpreter is kept started and idle, so a reset (or a restart after a
    killed cell) takes it at once instead of waiting for a new one to start."""

    def __init__(self, box: Sandbox, *, warm: bool = True) -> None:
        self.box = box
        self.warm = warm
        self.persistent = False
        self.timeout_s = box.limits.wall_time_s
        self._cell = 0
        self._repl: Optional[_Repl] = None
        self._spare: Optional[_Repl] = _Repl(box, self._repl_limits()) if warm else None
        self._refill: Optional[threading.Thread] = None
        self._spare_lock = threading.Lock()
        self._closed = False

    def reset(self, *, persistent: bool, timeout_s: float) -> None:
        """A new episode: a clean workspace and, when persistent, a new interpreter."""
        if self._repl is not None:
            self._repl.kill(wait=False)  # signalled now, reaped in the background
            self._repl = None
        with self._spare_lock:
            keep = [self._spare.process] if self._spare is not None else []
        # A spare still being started is not kept: if it is cleared away, the next take
        # notices it is dead and starts another.
        self.box.clear_workspace(keep=keep)
        self.persistent, self.timeout_s, self._cell = persistent, timeout_s, 0
        if persistent:
            self._repl = self._take_interpreter()

    def _take_interpreter(self) -> _Repl:
        with self._spare_lock:
            spare, self._spare = self._spare, None
        if spare is None or not spare.alive():
            if spare is not None:
                spare.kill(wait=False)
            spare = _Repl(self.box, self._repl_limits())
        spare.activate(self.box)
        if self.warm and (self._refill is None or not self._refill.is_alive()):
            # Started off the caller's path: forking the server is the slow part of a start.
            self._refill = threading.Thread(target=self._start_spare, daemon=True)
            self._refill.start()
        return spare

    def _start_spare(self) -> None:
        try:
            repl = _Repl(self.box, self._repl_limits())
        except SandboxError:
            return  # the next take starts one itself and reports the failure
        with self._spare_lock:
            if self._spare is None and not self._closed:
                self._spare, repl = repl, None
        if repl is not None:
            repl.kill(wait=False)

    def _repl_limits(self) -> Any:
        # RLIMIT_CPU counts the whole life of the interpreter: give it room for many cells.
        limits = self.box.limits
        cpu = None if limits.cpu_time_s is None else limits.cpu_time_s * 10
        return limits.model_copy(update={"cpu_time_s": cpu})

    def _paths(self) -> tuple[str, str, str, str]:
        name = f"{OUTPUT_DIR}/cell-{self._cell}"
        inside = f"{self.box.workspace}/{name}"
        return f"{name}.out", f"{name}.err", f"{inside}.out", f"{inside}.err"

    def execute(self, code: str) -> CellResult:
        self._cell += 1
        cap = self.box.limits.max_output_bytes
        if self.persistent:
            result, repl = self._execute_in_repl({"op": "exec", "code": code, "cell": self._cell})
            result.stdout, cut_out = repl.output(repl.out_fd, cap)
            result.stderr, cut_err = repl.output(repl.err_fd, cap)
            if result.interpreter_lost:
                repl.kill()
        else:
            out_rel, err_rel, out_abs, err_abs = self._paths()
            request = {"op": "exec", "code": code, "cell": self._cell}
            result = self._execute_once({**request, "out": out_abs, "err": err_abs})
            result.stdout, cut_out = _read_output(self.box, out_rel, cap)
            result.stderr, cut_err = _read_output(self.box, err_rel, cap)
        if (cut_out or cut_err) and result.status in (ExecStatus.OK, ExecStatus.ERROR):
            result.status = ExecStatus.OUTPUT_LIMIT
            result.message = f"printed more than {cap} bytes; the rest was dropped"
        result.truncated = cut_out or cut_err
        return result

    def _run_worker(
        self, request: dict[str, Any], timeout_s: float
    ) -> tuple[ExecResult, list[dict[str, Any]]]:
        """One request in a new worker process; its result and the frames it sent. A worker
        that exits without a single frame did not start: an infrastructure error."""
        token = secrets.token_hex(16)
        stdin = f"{token}\n{json.dumps(request)}\n"
        limits = self.box.limits.model_copy(update={"wall_time_s": timeout_s})
        run = self.box.run(_worker_argv(self.box), stdin=stdin, limits=limits).check()
        frames = _Frames(token.encode()).feed(run.stdout.encode())
        if not frames and run.status in (ExecStatus.OK, ExecStatus.ERROR):
            raise SandboxError(f"the interpreter did not start: {run.stderr[-500:]}")
        return run, frames

    def _execute_once(self, request: dict[str, Any]) -> CellResult:
        run, frames = self._run_worker(request, self.timeout_s)
        cells = [frame for frame in frames if "cell" in frame]
        return _from_frame(cells[-1]) if cells else _from_killed(run)

    def _execute_in_repl(self, request: dict[str, Any]) -> tuple[CellResult, _Repl]:
        if self._repl is None or not self._repl.alive():
            self._repl = self._take_interpreter()
        repl = self._repl
        repl.wait_ready()
        started = time.monotonic()
        repl.send(request)
        frame, ended = repl.receive(deadline=started + self.timeout_s)
        if frame is not None:
            result = _from_frame(frame)
            if result.status in (ExecStatus.MEMORY_LIMIT, ExecStatus.PROCESS_LIMIT):
                # The interpreter survived, but its state (or its process table) may not have.
                result.message += "; the interpreter was restarted (earlier definitions are gone)"
                result.interpreter_lost = True
            return result, repl
        assert ended is not None
        result = _from_killed(ended)
        result.duration_s = round(time.monotonic() - started, 6)
        result.interpreter_lost = True
        result.message += "; the interpreter was restarted (earlier definitions are gone)"
        return result, repl

    def restart_if_lost(self) -> None:
        """Warm a new interpreter right away when the last cell ended the old one."""
        if self.persistent and (self._repl is None or not self._repl.alive()):
            self._repl = self._take_interpreter()

    def judge(self, solution: str, calls: list[str], timeout_s: float) -> list[CaseResult]:
        """Evaluate `calls` against `solution` in a new process (never the agent's REPL)."""
        out_rel, err_rel = f"{OUTPUT_DIR}/judge.out", f"{OUTPUT_DIR}/judge.err"
        request = {
            "op": "judge",
            "solution": solution,
            "calls": calls,
            "out": f"{self.box.workspace}/{out_rel}",
            "err": f"{self.box.workspace}/{err_rel}",
        }
        run, frames = self._run_worker(request, timeout_s)
        for rel in (out_rel, err_rel):
            _read_output(self.box, rel, 1)  # only to delete it
        seen: dict[int, list[dict[str, Any]]] = {}
        for frame in frames:
            if isinstance(frame.get("case"), int):
                seen.setdefault(frame["case"], []).append(frame)
        why_missing = run.message or f"the judge ended ({run.status.value})"
        results = []
        for case in range(len(calls)):
            got = seen.get(case, [])
            if len(got) != 1:
                reason = why_missing if not got else "more than one result reported"
                results.append(CaseResult(error=reason))
            elif "error" in got[0]:
                results.append(CaseResult(error=str(got[0]["error"])))
            else:
                results.append(CaseResult(value=got[0].get("value")))
        return results

    def close(self) -> None:
        with self._spare_lock:
            self._closed = True
        if self._refill is not None:
            self._refill.join()
            self._refill = None
        for repl in (self._repl, self._spare):
            if repl is not None:
                repl.kill()
        self._repl = self._spare = None


def _from_frame(frame: dict[str, Any]) -> CellResult:
    exit_code = int(frame.get("exit_code", 0))
    exception = frame.get("exception") or {}
    status, message = ExecStatus.OK if exit_code == 0 else ExecStatus.ERROR, ""
    if exception.get("type") == "MemoryError":
        status, message = ExecStatus.MEMORY_LIMIT, "ran out of its memory limit"
    elif exception.get("type") == "BlockingIOError" and "temporarily" in exception.get(
        "message", ""
    ):
        status, message = ExecStatus.PROCESS_LIMIT, "hit its process limit (fork refused)"
    return CellResult(
        status=status,
        exit_code=exit_code,
        exception=exception or None,
        duration_s=float(frame.get("duration_s", 0.0)),
        message=message,
    )


def _from_killed(run: ExecResult) -> CellResult:
    """A cell whose interpreter ended without a reply: a limit, a signal or `os._exit`."""
    status = run.status
    if status is ExecStatus.OK:
        status = ExecStatus.ERROR  # exited 0 without finishing the cell (os._exit(0))
    message = run.message or f"the interpreter exited with code {run.exit_code}"
    exit_code = run.exit_code if run.exit_code is not None else -1
    return CellResult(
        status=status,
        exit_code=exit_code if status is ExecStatus.ERROR else -1,
        duration_s=run.duration_s,
        message=message,
    )


class _Repl:
    """A persistent interpreter in the sandbox, spawned at once and used when ready."""

    def __init__(self, box: Sandbox, limits: Any) -> None:
        self.token = secrets.token_hex(16)
        self.out_fd = self.err_fd = -1
        try:
            self.process: SandboxProcess = box.spawn(_worker_argv(box), limits=limits)
            self.process.stdin.write(f"{self.token}\n".encode())
            self.process.stdin.flush()
        except (OSError, ValueError) as exc:
            raise SandboxError(f"could not start the interpreter: {exc}") from exc
        self.frames = _Frames(self.token.encode())
        self.ready = False
        self.pending: list[dict[str, Any]] = []

    def activate(self, box: Sandbox) -> None:
        """Give it the files its cells print to, once the workspace is the episode's: the
        server reads them through descriptors opened now, before any of the agent's code runs,
        so whatever that code does to the paths, the server reads what the cells printed."""
        name = f"{OUTPUT_DIR}/repl-{self.token[:12]}"
        try:
            box.write_file(f"{name}.out", b"")
            box.write_file(f"{name}.err", b"")
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
            self.out_fd = os.open(box.host_path(f"{name}.out"), flags)
            self.err_fd = os.open(box.host_path(f"{name}.err"), flags)
        except OSError as exc:
            raise SandboxError(f"could not create the interpreter's output files: {exc}") from exc
        inside = f"{box.workspace}/{name}"
        self.send({"op": "setup", "out": f"{inside}.out", "err": f"{inside}.err"})

    def alive(self) -> bool:
        return self.process.alive()

    def wait_ready(self) -> None:
        if self.ready:
            return
        frame, ended = self.receive(deadline=time.monotonic() + START_TIMEOUT_S)
        if frame is None or not frame.get("ready"):
            why = f"{ended.status.value} {ended.message} {ended.stderr[-500:]}" if ended else ""
            raise SandboxError(f"the interpreter did not start: {why.strip()}")
        self.ready = True

    def send(self, request: dict[str, Any]) -> None:
        try:
            self.process.stdin.write((json.dumps(request) + "\n").encode())
            self.process.stdin.flush()
        except (OSError, ValueError):
            pass  # it died: receive() reports how

    def receive(self, deadline: float) -> tuple[Optional[dict[str, Any]], Optional[ExecResult]]:
        """The next frame, or (None, how the process ended) at EOF or the deadline."""
        if self.pending:
            return self.pending.pop(0), None
        fd = self.process.stdout.fileno()
        started = time.monotonic()
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None, self.process.ended(
                        duration_s=time.monotonic() - started, timed_out=True
                    )
                if not selector.select(timeout=left):
                    continue
                data = os.read(fd, 65536)
                if not data:
                    return None, self.process.ended(
                        stderr=self._stderr(), duration_s=time.monotonic() - started
                    )
                frames = self.frames.feed(data)
                if frames:
                    self.pending.extend(frames[1:])
                    return frames[0], None

    def _stderr(self) -> bytes:
        fd = self.process.stderr.fileno()
        os.set_blocking(fd, False)
        try:
            return os.read(fd, 65536)
        except OSError:
            return b""

    @staticmethod
    def output(fd: int, cap: int) -> tuple[str, bool]:
        """What the last cell printed to one of its files, cut at `cap` bytes."""
        try:
            size = os.fstat(fd).st_size
            data = os.pread(fd, min(size, cap), 0) if size else b""
        except OSError:
            return "", False
        return data.decode("utf-8", "replace"), size > cap

    def kill(self, *, wait: bool = True) -> None:
        self.process.kill(wait=wait)
        for fd in (self.out_fd, self.err_fd):
            try:
                os.close(fd)
            except OSError:
                pass
        self.out_fd = self.err_fd = -1
