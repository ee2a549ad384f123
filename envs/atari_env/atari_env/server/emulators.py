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

import asyncio
import atexit
import os
import pickle
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
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


# One request: op, an int argument, the length of a pickled payload after it.
_REQUEST = struct.Struct("<BqI")
# One reply: status, reward, terminated, truncated, lives, episode and total frame numbers,
# the length of what follows (the frame's bytes, or a pickled value or error message).
_REPLY = struct.Struct("<Bd??iqqI")
_MAKE, _RESET, _RESET_SEEDED, _STEP, _SEED_GAME = range(5)
_OK, _FRAME, _ERROR = range(3)


def _receive(sock: socket.socket, size: int) -> bytes:
    """Exactly `size` bytes, as one new bytes object (one system call unless interrupted)."""
    data = sock.recv(size, socket.MSG_WAITALL)
    if len(data) == size:
        return data
    if not data:
        raise EOFError("the other end closed the socket")
    return data + _receive(sock, size - len(data))


async def _receive_async(loop: asyncio.AbstractEventLoop, sock: socket.socket, size: int) -> bytes:
    """`_receive` on the event loop (a non-blocking socket)."""
    data = await loop.sock_recv(sock, size)
    if len(data) == size:
        return data
    if not data:
        raise EOFError("the other end closed the socket")
    buffer = bytearray(size)
    buffer[: len(data)] = data
    view, got = memoryview(buffer), len(data)
    while got < size:
        n = await loop.sock_recv_into(sock, view[got:])
        if not n:
            raise EOFError("the other end closed the socket")
        got += n
    return bytes(buffer)


class _Worker:
    """One emulator process. Each emulator gets a socket of its own (handed over on the control
    socket), so sessions never wait for each other's replies: the process serves whichever
    socket has a request."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "atari_env.server.emulators", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
        )
        theirs.close()
        self.control = ours
        self.emulators = 0

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def connect(self) -> socket.socket:
        """A new socket to the process, for one emulator (the caller holds the pool's lock)."""
        ours, theirs = socket.socketpair()
        try:
            socket.send_fds(self.control, [b"+"], [theirs.fileno()])
        except OSError:
            ours.close()
            raise _lost() from None
        finally:
            theirs.close()
        return ours

    def close(self) -> None:
        self.control.close()  # the process reads EOF and exits
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

    def create(self, **options: Any) -> RemoteEmulator:
        with self._lock:
            for attempt in range(2):
                for lost in [w for w in self._workers if not w.alive]:
                    self._workers.remove(lost)
                    lost.close()  # reaps the process
                if len(self._workers) < self.processes:
                    self._workers.append(_Worker())
                worker = min(self._workers, key=lambda w: w.emulators)
                try:
                    sock = worker.connect()
                    break
                except ServerError:  # died, not yet reaped: replace it once
                    self._workers.remove(worker)
                    worker.close()
                    if attempt:
                        raise
            worker.emulators += 1
        return RemoteEmulator(self, worker, sock, options)

    def release(self, worker: _Worker) -> None:
        with self._lock:
            worker.emulators -= 1

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

    def __init__(
        self, pool: EmulatorPool, worker: _Worker, sock: socket.socket, options: dict[str, Any]
    ) -> None:
        self._pool, self._worker, self._sock = pool, worker, sock
        self._lock = threading.Lock()
        self._closed = False
        self._lost = False
        try:
            self._meanings, self._shape, self._dtype = self._call(_MAKE, 0, options)[0]
        except BaseException:
            self.close()
            raise

    @property
    def alive(self) -> bool:
        return not (self._closed or self._lost)

    def get_action_meanings(self) -> list[str]:
        return list(self._meanings)

    def seed_game(self, seed: int) -> None:
        self._call(_SEED_GAME, seed)

    def reset(self, seed: int | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        if seed is None:
            reply = self._call(_RESET)
        else:
            reply = self._call(_RESET_SEEDED, seed)
        _, _, _, *info, frame = reply
        return self._frame(frame), _info(*info)

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        reward, terminated, truncated, *info, frame = self._call(_STEP, action)
        return self._frame(frame), reward, terminated, truncated, _info(*info)

    async def step_async(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        """`step` on the running event loop: the socket is awaited, no thread blocks. Calls
        must not overlap (a session's calls never do)."""
        if not self.alive:
            raise _lost()
        loop = asyncio.get_running_loop()
        sock = self._sock
        try:
            if sock.gettimeout() != 0.0:
                sock.setblocking(False)
            await loop.sock_sendall(sock, _REQUEST.pack(_STEP, action, 0))
            status, *fields, size = _REPLY.unpack(await _receive_async(loop, sock, _REPLY.size))
            body = await _receive_async(loop, sock, size) if size else b""
        except (EOFError, OSError):
            self._lost = True
            raise _lost() from None
        if status != _FRAME:
            raise EmulatorError(pickle.loads(body) if body else "no frame")
        reward, terminated, truncated, *info = fields
        return self._frame(body), reward, terminated, truncated, _info(*info)

    def close(self) -> None:
        """Ends the emulator (the process drops it when its socket closes)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._sock.close()
        self._pool.release(self._worker)

    def _call(self, op: int, arg: int = 0, payload: Any = None) -> tuple[Any, ...]:
        """The reply's fields and what followed it: the frame's bytes, or the unpickled value."""
        data = b"" if payload is None else pickle.dumps(payload)
        with self._lock:
            if not self.alive:
                raise _lost()
            try:
                if self._sock.gettimeout() is not None:
                    self._sock.setblocking(True)  # after `step_async`
                self._sock.sendall(_REQUEST.pack(op, arg, len(data)) + data)
                status, *fields, size = _REPLY.unpack(_receive(self._sock, _REPLY.size))
                body = _receive(self._sock, size) if size else b""
            except (EOFError, OSError):
                self._lost = True
                raise _lost() from None
        if status == _FRAME:
            return (*fields, body)
        value = pickle.loads(body) if body else None
        if status == _ERROR:
            raise EmulatorError(value)
        return (value,)

    def _frame(self, frame: bytes) -> np.ndarray:
        """A read-only array over the received bytes (no copy: `encode_frame` hands those bytes
        on as they are)."""
        return np.frombuffer(frame, dtype=self._dtype).reshape(self._shape)


def _info(lives: int, episode_frame_number: int, frame_number: int) -> dict[str, Any]:
    """ale-py's step/reset info."""
    return {
        "lives": lives,
        "episode_frame_number": episode_frame_number,
        "frame_number": frame_number,
    }


# -- the worker process -------------------------------------------------------------------------


def _serve(control: socket.socket) -> None:
    """Serve every emulator's socket until the server closes the control socket (or dies)."""
    from ale_py.env import AtariEnv as AleAtariEnv

    emulators: dict[socket.socket, AleAtariEnv | None] = {}
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ)
    while True:
        for key, _ in selector.select():
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            if sock is control:
                try:
                    _, fds, _, _ = socket.recv_fds(control, 1, 1)
                except OSError:
                    fds = []
                if not fds:
                    return  # the server closed it, or is gone
                new = socket.socket(fileno=fds[0])
                emulators[new] = None
                selector.register(new, selectors.EVENT_READ)
                continue
            try:
                op, arg, size = _REQUEST.unpack(_receive(sock, _REQUEST.size))
                payload = pickle.loads(_receive(sock, size)) if size else None
            except (EOFError, OSError):
                selector.unregister(sock)
                emulator = emulators.pop(sock)
                if emulator is not None:
                    emulator.close()
                sock.close()
                continue
            emulators[sock] = _answer(sock, emulators[sock], op, arg, payload, AleAtariEnv)


def _answer(sock: socket.socket, emulator: Any, op: int, arg: int, payload: Any, make: Any) -> Any:
    """Run one request on `emulator` (`make` builds it) and reply; the emulator after it."""

    def reply(status: int, value: Any = None) -> None:
        data = b"" if value is None else pickle.dumps(value)
        sock.sendall(_REPLY.pack(status, 0.0, False, False, 0, 0, 0, len(data)) + data)

    reward, terminated, truncated = 0.0, False, False
    try:
        if op == _MAKE:
            emulator = make(**payload)
            space = emulator.observation_space
            shape, dtype = list(space.shape or ()), np.dtype(space.dtype).str
            reply(_OK, (list(emulator.get_action_meanings()), shape, dtype))
            return emulator
        if op == _STEP:
            frame, reward, terminated, truncated, info = emulator.step(arg)
        elif op in (_RESET, _RESET_SEEDED):
            frame, info = emulator.reset(seed=arg if op == _RESET_SEEDED else None)
        elif op == _SEED_GAME:
            emulator.seed_game(arg)
            reply(_OK)
            return emulator
        else:
            raise ValueError(f"unknown request {op}")
    except Exception as exc:
        try:
            reply(_ERROR, str(exc))
        except OSError:
            pass
        return emulator
    frame = np.ascontiguousarray(frame)
    head = _REPLY.pack(_FRAME, float(reward), bool(terminated), bool(truncated),
                       int(info["lives"]), int(info["episode_frame_number"]),
                       int(info["frame_number"]), frame.nbytes)  # fmt: skip
    try:
        sock.sendmsg([head, frame.reshape(-1)])  # one system call, the frame not copied
    except OSError:
        pass  # the emulator's socket was closed: its EOF comes next
    return emulator


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the server's; EOF ends this
    _serve(socket.socket(fileno=int(sys.argv[1])))
