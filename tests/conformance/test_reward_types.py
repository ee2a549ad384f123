"""A reward keeps its JSON type (int, bool, float) on every transport."""

from __future__ import annotations

import httpx

from tests.support.server import RunningServer

from .helpers import request, ws_connect

SESSION_HEADER = "X-OpenEnv-Session-Id"


async def test_reward_type_identical_over_http_and_ws(counter_server: RunningServer) -> None:
    async with (
        httpx.AsyncClient(base_url=counter_server.url) as http,
        ws_connect(counter_server.ws_url) as ws,
    ):
        http_reset = (await http.post("/reset", json={})).json()
        ws_reset = (await request(ws, {"type": "reset"}))["data"]
        assert http_reset["reward"] == 0 and type(http_reset["reward"]) is int
        assert ws_reset["reward"] == 0 and type(ws_reset["reward"]) is int

        http_step = (await http.post("/step", json={"action": {"amount": 2}})).json()
        ws_step = (await request(ws, {"type": "step", "data": {"amount": 2}}))["data"]
        assert http_step["reward"] is True
        assert ws_step["reward"] is True
        assert http_step == ws_step

        sid = (await http.post("/reset", headers={SESSION_HEADER: "new"})).json()["session_id"]
        try:
            odd = (
                await http.post(
                    "/step", json={"action": {"amount": 3}}, headers={SESSION_HEADER: sid}
                )
            ).json()
            assert odd["reward"] is False
            ws_odd = (await request(ws, {"type": "step", "data": {"amount": 1}}))["data"]
            assert ws_odd["reward"] is False
        finally:
            await http.delete(f"/sessions/{sid}")


async def test_float_reward_stays_float(echo_server: RunningServer) -> None:
    async with (
        httpx.AsyncClient(base_url=echo_server.url) as http,
        ws_connect(echo_server.ws_url) as ws,
    ):
        http_reset = (await http.post("/reset", json={})).json()
        ws_reset = (await request(ws, {"type": "reset"}))["data"]
        assert type(http_reset["reward"]) is float
        assert type(ws_reset["reward"]) is float
        assert http_reset == ws_reset
