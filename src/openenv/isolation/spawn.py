"""Start child processes that die with the trainer, whichever thread asks for them.

PR_SET_PDEATHSIG makes the kernel signal a child when its parent dies, but "parent" means the
*thread* that forked it: a child forked on a short-lived thread (an event loop's executor, the
helper thread of `run_coroutine_sync`) is signalled when that thread ends, while the trainer
still runs. `spawn` forks every child on one thread that lives as long as the process.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import os
import signal
import threading
from collections.abc import Callable
from typing import Optional, TypeVar

T = TypeVar("T")

_PR_SET_PDEATHSIG = 1
_keeper: Optional[concurrent.futures.ThreadPoolExecutor] = None
_keeper_pid = 0
_lock = threading.Lock()


def spawn(make: Callable[[], T]) -> T:
    """Run `make` (which starts a process, e.g. `subprocess.Popen`) on the keeper thread."""
    global _keeper, _keeper_pid
    with _lock:
        # A forked copy of the trainer has the executor but not its thread: make its own.
        if _keeper is None or _keeper_pid != os.getpid():
            _keeper = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="openenv-spawn")
            _keeper_pid = os.getpid()
    return _keeper.submit(make).result()


def set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    """In a child (e.g. from `preexec_fn`): get `sig` when the parent thread dies. Linux only."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
