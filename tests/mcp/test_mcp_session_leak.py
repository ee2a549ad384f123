"""`/mcp` never opens a session whose id cannot reach the client.

Issue 11: a notification (no `id`) or batched `initialize` / `openenv/session/create` opened a
session whose id was never returned; it held a slot until the idle timeout (for a single-session
environment, the whole server for 15 minutes). These run against a server with one slot and no
queue, so a leaked session shows at once: the next client gets CAPACITY_REACHED.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from tests.support.server import RunningServer, serve

ECHO_APP = "echo_env.server.app:app"
STANDARD = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-06-18"}


@pytest.fixture(scope="module")
def one_slot_server() -> Iterator[RunningServer]:
    env = {"MAX_CONCURRENT_ENVS": "1", "OPENENV_MAX_QUEUED": "0", "OPENENV_QUEUE_TIMEOUT": ""}
    with serve(ECHO_APP, env=env, in_process=True) as server:
        yield server


def _post(url: str, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(f"{url}/mcp", json=body, headers=headers, timeout=30)


def _capacity(url: str) -> dict[str, Any]:
    return httpx.get(f"{url}/capacity", timeout=30).json()


def _assert_server_free(url: str) -> None:
    """No session is left behind: the only slot is free, and a client can take it."""
    assert _capacity(url)["active_sessions"] == 0
    created = _post(url, {"jsonrpc": "2.0", "method": "openenv/session/create", "id": 9})
    sid = created.json()["result"]["session_id"]
    closed = _post(
        url,
        {
            "jsonrpc": "2.0",
            "method": "openenv/session/close",
            "params": {"session_id": sid},
            "id": 10,
        },
    )
    assert closed.json()["result"]["closed"] is True
    assert _capacity(url)["active_sessions"] == 0


def _invalid_request(reply: dict[str, Any], rid: Any) -> str:
    assert reply["jsonrpc"] == "2.0" and reply["id"] == rid, reply
    assert reply["error"]["code"] == -32600, reply
    return reply["error"]["message"]


@pytest.mark.parametrize("method", ["initialize", "openenv/session/create"])
def test_notification_opens_no_session(one_slot_server: RunningServer, method: str) -> None:
    url = one_slot_server.url
    response = _post(url, {"jsonrpc": "2.0", "method": method, "params": {}})
    assert response.status_code == 200  # OpenEnv's dialect answers every POST with 200
    assert "needs an id" in _invalid_request(response.json(), None)
    _assert_server_free(url)


def test_standard_notification_initialize_is_http_400(one_slot_server: RunningServer) -> None:
    """Streamable HTTP: a notification the server does not accept is an HTTP error."""
    url = one_slot_server.url
    response = _post(url, {"jsonrpc": "2.0", "method": "initialize", "params": {}}, STANDARD)
    assert response.status_code == 400
    assert "mcp-session-id" not in response.headers
    _invalid_request(response.json(), None)
    _assert_server_free(url)


@pytest.mark.parametrize("headers", [None, STANDARD])
def test_batched_initialize_opens_no_session(
    one_slot_server: RunningServer, headers: dict[str, str] | None
) -> None:
    url = one_slot_server.url
    batch = [
        {"jsonrpc": "2.0", "method": "initialize", "params": {}, "id": 1},
        {"jsonrpc": "2.0", "method": "ping", "id": 2},
        {"jsonrpc": "2.0", "method": "openenv/session/create"},
    ]
    response = _post(url, batch, headers)
    assert response.status_code == 200
    replies = {r["id"]: r for r in response.json()}
    assert "batch" in _invalid_request(replies[1], 1)
    assert replies[2]["result"] == {}
    assert "needs an id" in _invalid_request(replies[None], None)
    assert "mcp-session-id" not in response.headers
    _assert_server_free(url)


def test_batched_session_create_returns_its_id(one_slot_server: RunningServer) -> None:
    """In a batch, `openenv/session/create` with an id answers with the session id, so the
    client can use and close it: that session is not a leak."""
    url = one_slot_server.url
    response = _post(url, [{"jsonrpc": "2.0", "method": "openenv/session/create", "id": "c"}])
    [reply] = response.json()
    sid = reply["result"]["session_id"]
    assert _capacity(url)["active_sessions"] == 1
    listed = _post(
        url, {"jsonrpc": "2.0", "method": "tools/list", "params": {"session_id": sid}, "id": 1}
    )
    assert listed.json()["result"]["tools"]
    close = {"jsonrpc": "2.0", "method": "openenv/session/close", "params": {"session_id": sid}}
    _post(url, {**close, "id": 2})
    _assert_server_free(url)


def test_initialize_request_still_opens_a_session(one_slot_server: RunningServer) -> None:
    url = one_slot_server.url
    body = {"jsonrpc": "2.0", "method": "initialize", "params": {}, "id": 1}
    response = _post(url, body, STANDARD)
    assert response.status_code == 200
    sid = response.headers["mcp-session-id"]
    assert response.json()["result"]["serverInfo"]["name"]
    assert _capacity(url)["active_sessions"] == 1
    deleted = httpx.delete(f"{url}/mcp", headers={**STANDARD, "mcp-session-id": sid})
    assert deleted.status_code == 200
    _assert_server_free(url)


async def test_websocket_notifications_open_nothing(one_slot_server: RunningServer) -> None:
    """Over WebSocket `/mcp` the connection is the session: these methods open no other."""
    url = one_slot_server.url.replace("http://", "ws://") + "/mcp"
    async with connect(url, proxy=None) as ws:
        for method in ("initialize", "openenv/session/create"):
            await ws.send(f'{{"jsonrpc":"2.0","method":"{method}","params":{{}}}}')
        await ws.send('{"jsonrpc":"2.0","method":"openenv/session/create","id":3}')
        reply = json.loads(await ws.recv())  # the notifications got no reply
        assert reply["id"] == 3 and reply["result"]["session_id"]
        assert _capacity(one_slot_server.url)["active_sessions"] == 1
    _wait_free(one_slot_server.url)


def _wait_free(url: str) -> None:
    deadline = time.monotonic() + 30
    while _capacity(url)["active_sessions"] != 0:
        assert time.monotonic() < deadline, _capacity(url)
        time.sleep(0.05)
