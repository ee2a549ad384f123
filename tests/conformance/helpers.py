"""Raw-frame helpers shared by the conformance tests."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

#: Bound of every wait for something that should happen: only a real hang reaches it.
TIMEOUT = 30.0


def ws_connect(url: str, **kwargs: Any) -> Any:
    """`websockets` connection with test-friendly defaults (no proxy, no compression)."""
    kwargs.setdefault("open_timeout", TIMEOUT)
    kwargs.setdefault("close_timeout", 2)
    kwargs.setdefault("max_size", None)
    kwargs.setdefault("compression", None)
    kwargs.setdefault("proxy", None)
    return connect(url, **kwargs)


async def send(ws: ClientConnection, message: Any) -> None:
    await ws.send(message if isinstance(message, (str, bytes)) else json.dumps(message))


async def recv(ws: ClientConnection, timeout: float = TIMEOUT) -> dict[str, Any]:
    raw = await asyncio.wait_for(ws.recv(), timeout)
    return json.loads(raw)


async def request(ws: ClientConnection, message: Any, timeout: float = TIMEOUT) -> dict[str, Any]:
    """Send one frame and return the next frame (strict request -> response)."""
    await send(ws, message)
    return await recv(ws, timeout)


async def expect_closed(ws: ClientConnection, timeout: float = TIMEOUT) -> list[dict[str, Any]]:
    """Wait until the server closes the connection; return any frames received before that."""
    frames: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"connection still open after {timeout}s; frames: {frames}")
        try:
            raw = await asyncio.wait_for(ws.recv(), remaining)
        except ConnectionClosed:
            return frames
        except asyncio.TimeoutError:
            continue
        frames.append(json.loads(raw))


def assert_error(
    frame: dict[str, Any], code: str, category: str | None = None, *, has_id: Any = None
) -> dict[str, Any]:
    """An OpenEnv error frame: `{"type": "error", "data": {"message", "code", "category", ...}}`."""
    assert frame["type"] == "error", frame
    data = frame["data"]
    assert data["code"] == code, frame
    assert isinstance(data["message"], str) and data["message"], frame
    assert data["category"] in ("client", "environment", "infrastructure"), frame
    if category is not None:
        assert data["category"] == category, frame
    if has_id is None:
        assert "id" not in frame, frame
    else:
        assert frame["id"] == has_id, frame
    return data


def assert_observation_frame(frame: dict[str, Any]) -> dict[str, Any]:
    """`{"type":"observation","data":{"observation":{...},"reward":...,"done":...,"metadata":{...}}}`."""
    assert set(frame) == {"type", "data"}, frame
    assert frame["type"] == "observation", frame
    data = frame["data"]
    assert set(data) == {"observation", "reward", "done", "metadata"}, frame
    assert isinstance(data["observation"], dict)
    assert isinstance(data["done"], bool)
    assert isinstance(data["metadata"], dict)
    # The observation's metadata travels at the top level (and inside the observation).
    assert data["observation"].get("metadata", data["metadata"]) == data["metadata"], frame
    return data


def capacity(base_url: str) -> dict[str, Any]:
    response = httpx.get(f"{base_url}/capacity", timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    return response.json()


async def poll(predicate: Callable[[], bool], timeout: float = TIMEOUT, interval: float = 0.05):
    """Wait until `predicate()` is true; fail with the last value otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(interval)


async def wait_capacity(base_url: str, timeout: float = TIMEOUT, **expected: int) -> dict[str, Any]:
    """Poll `/capacity` until its fields equal `expected` (e.g. active_sessions=0)."""
    last: dict[str, Any] = {}
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(timeout=TIMEOUT) as client:
        while True:
            last = (await client.get(f"{base_url}/capacity")).json()
            if all(last.get(k) == v for k, v in expected.items()):
                return last
            if time.monotonic() > deadline:
                raise AssertionError(f"/capacity never matched {expected}: last {last}")
            await asyncio.sleep(0.05)
