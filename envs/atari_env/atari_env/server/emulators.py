"""Atari emulators in worker processes, so the steps of different sessions run in parallel.

ale-py holds the GIL while it emulates (`act`, `getScreenRGB`: measured, see bench/README.md
"Atari frames"), so in one server process every session's ~230 µs of emulation queues behind
the others' and behind the server's own work. A small pool of worker processes (one per core
by default) hosts the emulators instead; a session's step is then one round trip on a local
socket (the action out; the reward, flags and the frame's raw bytes back), during which the
server's thread waits without the GIL.

`RemoteEmulator` has the methods of ale-py's `AtariEnv` that `AtariEnvironment` uses and runs
them on an `ale_py.env.AtariEnv` in the worker, so the episodes are the same as in process.
"""

from __future__ import annotations

import atexit
import itertools
import os
import signal
import socket
import subprocess
import sys
import threading
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from openenv.core.errors import ServerError

#: Worker processes of the server's pool: a number, or "auto" (one per core, at most 8);
#: 0 keeps the emulators in the server process.
PROCESSES_VAR = "ATARI_EMULATOR_PROCESSES"


def processes_setting(value: int | str | None = None) -> int:
    """How many emulator processes `value` (else `$ATARI_EMULATOR_PROCESSES`, else 0) means."""
    if value is None:
        value = os.environ.get(PROCESSES_VAR, "").strip() or 0
    if isinstance(value, str):
        if value.lower() == "auto":
            return min(len(os.sched_getaffinity(0)), 8)
        try:
            value = int(value)
        except ValueError:
            raise ValueError(f"{PROCESSES_VAR}={value!r}: a number or 'auto'") from None
    if value < 0:
        raise ValueError(f"emulator processes must be 0 or more, not {value}")
    return value


class EmulatorError(RuntimeError):
    """ale-py refused a request in the worker (e.g. a mode the game does not have); the
    message is ale-py's."""


class _Worker:
    """One emulator process and the socket to it; one request at a time (`lock`)."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "atari_env.server.emulators", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
        )
        theirs.close()
        self.conn = Connection(ours.detach())
        self.lock = threading.Lock()
        self.emulators = 0
        self.alive = True

    def call(self, op: str, handle: int, arg: Any = None) -> tuple[Any, bytes | None]:
        """The worker's answer to one request, and the frame's bytes when it sent one."""
        with self.lock:
            if not self.alive:
                raise _lost()
            try:
                self.conn.send((op, handle, arg))
                status, value = self.conn.recv()
                frame = self.conn.recv_bytes() if status == "frame" else None
            except (EOFError, OSError):
                self.alive = False
                raise _lost() from None
        if status == "error":
            raise EmulatorError(value)
        return value, frame

    def close(self) -> None:
        self.alive = False
        self.conn.close()  # the worker reads EOF and exits
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _lost() -> ServerError:
    # Infrastructure (SESSION_ERROR), never an episode's outcome.
    return ServerError("The Atari emulator process exited; reset() to start a new episode")


class EmulatorPool:
    """`processes` workers, started on first use; each new emulator goes to the least loaded."""

    def __init__(self, processes: int) -> None:
        self.processes = processes
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        self._handles = itertools.count(1)

    def create(self, **options: Any) -> RemoteEmulator:
        with self._lock:
            self._workers = [w for w in self._workers if w.alive]
            if len(self._workers) < self.processes:
                self._workers.append(_Worker())
            worker = min(self._workers, key=lambda w: w.emulators)
            worker.emulators += 1
        return RemoteEmulator(worker, next(self._handles), options)

    def close(self) -> None:
        with self._lock:
            workers, self._workers = self._workers, []
        for worker in workers:
            worker.close()


_pools: dict[int, EmulatorPool] = {}
_pools_lock = threading.Lock()


def shared_pool(processes: int) -> EmulatorPool:
    """The process-wide pool of `processes` workers (closed at exit)."""
    with _pools_lock:
        pool = _pools.get(processes)
        if pool is None:
            if not _pools:
                atexit.register(close_pools)
            pool = _pools[processes] = EmulatorPool(processes)
        return pool


def close_pools() -> None:
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.close()


class RemoteEmulator:
    """ale-py's `AtariEnv` (the methods `AtariEnvironment` calls) in a worker process."""

    def __init__(self, worker: _Worker, handle: int, options: dict[str, Any]) -> None:
        self._worker = worker
        self._handle = handle
        self._closed = False
        try:
            self._meanings, _ = worker.call("make", handle, options)
        except BaseException:
            self._release()
            raise

    @property
    def alive(self) -> bool:
        return self._worker.alive and not self._closed

    def get_action_meanings(self) -> list[str]:
        return list(self._meanings)

    def seed_game(self, seed: int) -> None:
        self._worker.call("seed_game", self._handle, seed)

    def reset(self, seed: int | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        (shape, dtype, info), frame = self._worker.call("reset", self._handle, seed)
        return _array(frame, shape, dtype), info

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        (shape, dtype, reward, terminated, truncated, info), frame = self._worker.call(
            "step", self._handle, action
        )
        return _array(frame, shape, dtype), reward, terminated, truncated, info

    def close(self) -> None:
        if self._closed:
            return
        try:
            if self._worker.alive:
                self._worker.call("close", self._handle)
        except ServerError:
            pass
        finally:
            self._release()

    def _release(self) -> None:
        self._closed = True
        with self._worker.lock:
            self._worker.emulators -= 1


def _array(frame: bytes | None, shape: list[int], dtype: str) -> np.ndarray:
    """The frame as a read-only array over the received bytes (no copy: `encode_frame` hands
    those bytes on as they are)."""
    assert frame is not None
    return np.frombuffer(frame, dtype=dtype).reshape(shape)


# -- the worker process -------------------------------------------------------------------------


def _serve(conn: Connection) -> None:
    """Answer requests until the server closes its end (or dies)."""
    from ale_py.env import AtariEnv as AleAtariEnv

    emulators: dict[int, AleAtariEnv] = {}
    while True:
        try:
            op, handle, arg = conn.recv()
        except (EOFError, OSError):
            return
        try:
            if op == "make":
                emulators[handle] = AleAtariEnv(**arg)
                conn.send(("ok", list(emulators[handle].get_action_meanings())))
                continue
            emulator = emulators[handle]
            if op == "step":
                frame, reward, terminated, truncated, info = emulator.step(arg)
                head = (float(reward), bool(terminated), bool(truncated), dict(info))
            elif op == "reset":
                frame, info = emulator.reset(seed=arg)
                head = (dict(info),)
            elif op == "seed_game":
                emulator.seed_game(arg)
                conn.send(("ok", None))
                continue
            elif op == "close":
                emulators.pop(handle).close()
                conn.send(("ok", None))
                continue
            else:
                raise ValueError(f"unknown request {op!r}")
        except Exception as exc:
            conn.send(("error", str(exc)))
            continue
        frame = np.ascontiguousarray(frame)
        conn.send(("frame", (list(frame.shape), frame.dtype.str, *head)))
        conn.send_bytes(frame.reshape(-1))  # (send_bytes counts a 3-D buffer by rows)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the server's; EOF ends this
    _serve(Connection(int(sys.argv[1])))
