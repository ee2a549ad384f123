"""An observation that cannot be encoded is the environment's error, and nothing else breaks."""

from __future__ import annotations

import json

import httpx
from websockets.asyncio.client import connect

from tests.support.server import serve

STEP = {"amount": 1}


async def test_unencodable_observation_is_an_environment_error() -> None:
    with serve("apps.unencodable:app") as server:
        async with connect(server.ws_url) as ws:
            await ws.send(json.dumps({"type": "reset", "data": {}}))
            assert json.loads(await ws.recv())["type"] == "observation"
            await ws.send(json.dumps({"type": "step", "data": STEP}))
            error = json.loads(await ws.recv())
            assert error["type"] == "error"
            assert error["data"]["code"] == "EXECUTION_ERROR"
            assert error["data"]["category"] == "environment"
            assert "JSON" in error["data"]["message"]
            await ws.send(json.dumps({"type": "state"}))  # the session goes on
            assert json.loads(await ws.recv())["type"] == "state"
        async with httpx.AsyncClient(base_url=server.url) as http:
            opened = await http.post("/reset", headers={"X-OpenEnv-Session-Id": "new"})
            headers = {"X-OpenEnv-Session-Id": opened.json()["session_id"]}
            reply = await http.post("/step", json={"action": STEP}, headers=headers)
            assert reply.status_code == 500
            assert reply.json()["detail"]["category"] == "environment"
            # The keep-alive connection survives and the session is still there.
            state = await http.get("/state", headers=headers)
            assert state.status_code == 200
