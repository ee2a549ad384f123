"""OpenEnv JSON-RPC over POST /mcp, `{"type":"mcp"}` over /ws, and raw JSON-RPC over WS /mcp."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from openenv.core.generic_client import GenericEnvClient


def _rpc(method: str, params: dict[str, Any] | None = None, rid: Any = 1) -> dict[str, Any]:
    body: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "id": rid}
    if params is not None:
        body["params"] = params
    return body


async def _post(url: str, body: Any) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=10) as http:
        if isinstance(body, (bytes, str)):
            reply = await http.post(
                f"{url}/mcp", content=body, headers={"content-type": "application/json"}
            )
        else:
            reply = await http.post(f"{url}/mcp", json=body)
    assert reply.status_code == 200, reply.text
    data = reply.json()
    for item in data if isinstance(data, list) else [data]:
        assert item["jsonrpc"] == "2.0"
        assert ("result" in item) != ("error" in item)  # exactly one of them
    return data


def _active(url: str) -> int:
    return httpx.get(f"{url}/capacity", timeout=5).json()["active_sessions"]


async def test_tools_list(echo_server):
    reply = await _post(echo_server.url, _rpc("tools/list", rid=11))
    assert reply["id"] == 11
    tools = {t["name"]: t for t in reply["result"]["tools"]}
    assert set(tools) == {"echo_message", "echo_with_length"}
    assert tools["echo_message"]["inputSchema"]["required"] == ["message"]


async def test_tools_call(echo_server):
    reply = await _post(
        echo_server.url,
        _rpc("tools/call", {"name": "echo_message", "arguments": {"message": "Hi"}}, rid="a"),
    )
    assert reply["id"] == "a"
    result = reply["result"]
    assert result["data"] == "Hi"
    assert result["is_error"] is False
    assert result["content"][0]["text"] == "Hi"

    reply = await _post(
        echo_server.url,
        _rpc("tools/call", {"name": "echo_with_length", "arguments": {"message": "Hey"}}),
    )
    assert reply["result"]["data"] == {"message": "Hey", "length": 3}
    assert reply["result"]["structured_content"] == {"message": "Hey", "length": 3}


async def test_session_create_call_close(tools_server):
    url = tools_server.url
    before = _active(url)
    created = await _post(url, _rpc("openenv/session/create"))
    sid = created["result"]["session_id"]
    assert isinstance(sid, str) and sid
    assert _active(url) == before + 1

    # Calls with params.session_id run on that session's environment (its counter goes up);
    # calls without it run on a throwaway environment.
    for expected in (1, 2, 3):
        reply = await _post(url, _rpc("tools/call", {"name": "incr", "session_id": sid}))
        assert reply["result"]["data"] == expected
    stateless = await _post(url, _rpc("tools/call", {"name": "incr"}))
    assert stateless["result"]["data"] == 1
    listed = await _post(url, _rpc("tools/list", {"session_id": sid}))
    assert "incr" in {t["name"] for t in listed["result"]["tools"]}

    other = (await _post(url, _rpc("openenv/session/create")))["result"]["session_id"]
    assert other != sid
    reply = await _post(url, _rpc("tools/call", {"name": "incr", "session_id": other}))
    assert reply["result"]["data"] == 1
    await _post(url, _rpc("openenv/session/close", {"session_id": other}))

    closed = await _post(url, _rpc("openenv/session/close", {"session_id": sid}, rid=5))
    assert closed["id"] == 5
    assert closed["result"] == {"session_id": sid, "closed": True}
    assert _active(url) == before

    again = await _post(url, _rpc("openenv/session/close", {"session_id": sid}, rid=6))
    assert again["id"] == 6
    assert again["error"]["code"] == -32602
    assert "Unknown session_id" in again["error"]["message"]

    # The closed session cannot be used any more.
    gone = await _post(url, _rpc("tools/call", {"name": "incr", "session_id": sid}))
    assert gone["error"]["code"] == -32602


async def test_session_close_requires_session_id(echo_server):
    reply = await _post(echo_server.url, _rpc("openenv/session/close", {}))
    assert reply["error"]["code"] == -32602


@pytest.mark.parametrize(
    "body",
    [b"{not json", b'{"jsonrpc": "2.0", "method": "tools/list", "id": 1', b"\xff\xfe"],
)
async def test_parse_error(echo_server, body):
    reply = await _post(echo_server.url, body)
    assert reply["error"]["code"] == -32700
    assert reply["id"] is None


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"jsonrpc": "2.0", "id": 1},  # no method
        {"jsonrpc": "1.0", "method": "tools/list", "id": 1},
        {"jsonrpc": "2.0", "method": "tools/list", "params": [1, 2], "id": 1},
        {"jsonrpc": "2.0", "method": "tools/list", "id": 1, "extra": True},
        {"jsonrpc": "2.0", "method": 5, "id": 1},
        b'"just a string"',
        b"42",
    ],
)
async def test_invalid_request(echo_server, body):
    reply = await _post(echo_server.url, body)
    assert reply["error"]["code"] == -32600
    assert reply["id"] == (body.get("id") if isinstance(body, dict) else None)


async def test_batch_is_answered_per_item(echo_server):
    reply = await _post(
        echo_server.url,
        [_rpc("tools/list", rid=1), 5, _rpc("nope", rid=2), {"jsonrpc": "2.0", "method": "x/y"}],
    )
    assert isinstance(reply, list) and len(reply) == 3  # the notification gets no answer
    by_id = {r["id"]: r for r in reply}
    assert "tools" in by_id[1]["result"]
    assert by_id[None]["error"]["code"] == -32600
    assert by_id[2]["error"]["code"] == -32601


async def test_empty_and_overlong_batches_are_invalid_requests(echo_server):
    from openenv.core.env_server.mcp_endpoint import MAX_BATCH

    assert (await _post(echo_server.url, []))["error"]["code"] == -32600
    batch = [_rpc("tools/list", rid=n) for n in range(MAX_BATCH + 1)]
    reply = await _post(echo_server.url, batch)
    assert reply["error"]["code"] == -32600 and str(MAX_BATCH) in reply["error"]["message"]
    full = await _post(echo_server.url, batch[:MAX_BATCH])
    assert isinstance(full, list) and len(full) == MAX_BATCH


async def test_method_not_found(echo_server):
    for method in ("tools/nope", "resources/list", "openenv/session/explode"):
        reply = await _post(echo_server.url, _rpc(method, rid=9))
        assert reply["id"] == 9
        assert reply["error"]["code"] == -32601
        assert method in reply["error"]["message"]


@pytest.mark.parametrize("params", [{}, {"arguments": {"message": "x"}}, {"name": ""}, {"name": 3}])
async def test_tools_call_without_a_name(echo_server, params):
    reply = await _post(echo_server.url, _rpc("tools/call", params))
    assert reply["error"]["code"] == -32602


async def test_tools_call_with_non_object_arguments(echo_server):
    reply = await _post(
        echo_server.url, _rpc("tools/call", {"name": "echo_message", "arguments": [1]})
    )
    assert reply["error"]["code"] == -32602


async def test_notification_gets_no_reply(echo_server):
    async with httpx.AsyncClient(timeout=5) as http:
        reply = await http.post(
            f"{echo_server.url}/mcp", json={"jsonrpc": "2.0", "method": "notifications/x"}
        )
    assert reply.status_code == 202
    assert reply.content == b""


async def test_ws_mcp_message_plain_protocol(echo_server):
    """OpenEnv's `{"type":"mcp"}` frame over /ws, as an OpenEnv client sends it."""
    async with connect(echo_server.ws_url) as ws:
        await ws.send(json.dumps({"type": "mcp", "data": _rpc("tools/list", rid=3)}))
        frame = json.loads(await ws.recv())
        assert frame["type"] == "mcp"
        assert frame["data"]["id"] == 3
        assert {t["name"] for t in frame["data"]["result"]["tools"]} == {
            "echo_message",
            "echo_with_length",
        }
        call = _rpc("tools/call", {"name": "echo_message", "arguments": {"message": "ws"}}, 4)
        await ws.send(json.dumps({"type": "mcp", "data": call}))
        frame = json.loads(await ws.recv())
        assert frame == {"type": "mcp", "data": frame["data"]}
        assert frame["data"]["result"]["data"] == "ws"

        await ws.send(json.dumps({"type": "mcp", "data": _rpc("nope/nope", rid=5)}))
        frame = json.loads(await ws.recv())
        assert frame["type"] == "mcp"
        assert frame["data"]["error"]["code"] == -32601

        # The connection still does Gym-style work afterwards.
        await ws.send(json.dumps({"type": "reset"}))
        frame = json.loads(await ws.recv())
        assert frame["type"] == "observation"
        assert frame["data"]["observation"]["echoed_message"] == "Echo environment ready!"


async def test_ws_mcp_message_via_client_uses_its_session(tools_server):
    async with GenericEnvClient(base_url=tools_server.url) as client:
        await client.reset()
        created = await client.mcp_request("openenv/session/create")
        assert created["result"]["session_id"] == client.session_id
        for expected in (1, 2):
            reply = await client.mcp_request("tools/call", {"name": "incr"})
            assert reply["result"]["data"] == expected
        # The same environment serves Gym-style steps on this connection.
        step = await client.step({"type": "call_tool", "tool_name": "incr", "arguments": {}})
        assert step.observation["result"]["data"] == 3
        # A connection cannot close its own session over itself.
        reply = await client.mcp_request("openenv/session/close", {"session_id": client.session_id})
        assert reply["error"]["code"] == -32600
        assert (await client.state())["step_count"] == 1


async def test_ws_mcp_endpoint_raw_jsonrpc(tools_server):
    url = tools_server.url
    before = _active(url)
    ws_url = url.replace("http://", "ws://") + "/mcp"
    async with connect(ws_url) as ws:
        await ws.send(json.dumps(_rpc("tools/list", rid=1)))
        reply = json.loads(await ws.recv())
        assert reply["id"] == 1
        assert "incr" in {t["name"] for t in reply["result"]["tools"]}
        assert _active(url) == before + 1  # one connection is one session

        for rid, expected in ((2, 1), (3, 2)):
            await ws.send(json.dumps(_rpc("tools/call", {"name": "incr"}, rid)))
            reply = json.loads(await ws.recv())
            assert reply["id"] == rid
            assert reply["result"]["data"] == expected

        await ws.send("{broken")
        reply = json.loads(await ws.recv())
        assert reply["error"]["code"] == -32700

        await ws.send(json.dumps(_rpc("nope", rid=7)))
        reply = json.loads(await ws.recv())
        assert (reply["id"], reply["error"]["code"]) == (7, -32601)

        await ws.send(json.dumps({"jsonrpc": "2.0", "id": 8}))
        reply = json.loads(await ws.recv())
        assert reply["error"]["code"] == -32600

        await ws.send(
            json.dumps(_rpc("tools/call", {"name": "lookup", "arguments": {"key": "k"}}, 9))
        )
        reply = json.loads(await ws.recv())
        assert reply["id"] == 9
        assert reply["error"]["data"]["error_type"] == "execution_error"
    for _ in range(100):
        if _active(url) == before:
            break
        await asyncio.sleep(0.05)
    assert _active(url) == before


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"]
)
async def test_browser_simple_requests_cannot_call_tools(echo_server, content_type):
    """Bodies a page on any origin may POST without a CORS preflight are refused unread."""
    body = json.dumps(_rpc("tools/call", {"name": "echo_message", "arguments": {"message": "x"}}))
    async with httpx.AsyncClient(timeout=10) as http:
        reply = await http.post(
            f"{echo_server.url}/mcp", content=body, headers={"content-type": content_type}
        )
    assert reply.status_code == 415
    assert "application/json" in reply.json()["error"]["message"]
    assert "result" not in reply.json()
    # JSON with a charset parameter is still JSON.
    ok = await http_post_json(echo_server.url, body, "application/json; charset=utf-8")
    assert ok["result"]


async def http_post_json(url: str, body: str, content_type: str) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=10) as http:
        reply = await http.post(f"{url}/mcp", content=body, headers={"content-type": content_type})
    assert reply.status_code == 200, reply.text
    return reply.json()
