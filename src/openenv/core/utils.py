"""Small helpers shared by the client and the server."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_coroutine_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from synchronous code.

    Works whether or not this thread already runs an event loop: inside a running loop the
    coroutine runs on a short-lived helper thread instead of deadlocking the caller.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def convert_to_ws_url(url: str) -> str:
    """Map an http(s)/ws(s)/bare host URL to its WebSocket base (no trailing slash)."""
    url = url.strip().rstrip("/")
    if url.startswith("http://"):
        return "ws://" + url[len("http://") :]
    if url.startswith("https://"):
        return "wss://" + url[len("https://") :]
    if url.startswith(("ws://", "wss://")):
        return url
    return "ws://" + url


def convert_to_http_url(url: str) -> str:
    """Map a ws(s)/http(s)/bare host URL to its HTTP base (no trailing slash)."""
    url = url.strip().rstrip("/")
    if url.startswith("ws://"):
        return "http://" + url[len("ws://") :]
    if url.startswith("wss://"):
        return "https://" + url[len("wss://") :]
    if url.startswith(("http://", "https://")):
        return url
    return "http://" + url
