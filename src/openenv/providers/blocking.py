"""Blocking provider calls (cloud SDKs, Kubernetes' client) run from async code.

A start whose task is cancelled while its thread is still creating the environment must not
leave it behind: `create_in_thread` removes what the thread made once it is done, and the
provider's `close()` waits for that removal (`wait_for_cleanups`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any, Optional

from .base import Provider, StartedEnv, run_blocking

logger = logging.getLogger("openenv.providers")


async def create_in_thread(
    provider: Provider,
    create: Callable[[], StartedEnv],
    remove: Callable[[StartedEnv], None],
) -> StartedEnv:
    """Run a blocking `create` on a thread. If the start is cancelled meanwhile, the thread
    removes what it created itself (nothing depends on the event loop, which may be closed by
    then); the provider's `close()` waits for that (`wait_for_cleanups`)."""
    lock = threading.Lock()
    outcome: dict[str, Any] = {"cancelled": False, "delivered": None}
    finished = threading.Event()

    def remove_quietly(env: StartedEnv) -> None:
        try:
            remove(env)
        except Exception as exc:
            logger.warning("could not remove %s of a cancelled start: %s", env.id, exc)

    def run() -> Optional[StartedEnv]:
        try:
            env = create()
            with lock:
                if not outcome["cancelled"]:
                    outcome["delivered"] = env
                    return env
            remove_quietly(env)  # the start was cancelled meanwhile
            return None
        finally:
            finished.set()

    try:
        env = await run_blocking(run)
    except asyncio.CancelledError:
        with lock:
            outcome["cancelled"] = True
            delivered = outcome["delivered"]
        if delivered is not None:  # done just as the start was cancelled
            finished.clear()

            def remove_delivered() -> None:
                remove_quietly(delivered)
                finished.set()

            threading.Thread(target=remove_delivered, daemon=True).start()
        _cleanups.setdefault(id(provider), []).append(finished)
        raise
    assert env is not None
    return env


#: provider id -> threads of its starts, which its `close()` waits for.
_cleanups: dict[int, list[threading.Event]] = {}


async def wait_for_cleanups(provider: Provider, timeout_s: float = 60.0) -> None:
    """Wait until the provider's start threads (and removals of cancelled ones) are done."""
    for finished in _cleanups.pop(id(provider), []):
        await run_blocking(finished.wait, timeout_s)
