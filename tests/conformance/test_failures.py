"""Environments that fail: a factory that raises, a reset that raises."""

from __future__ import annotations

import httpx

from tests.support.server import RunningServer

from .helpers import (
    assert_error,
    assert_observation_frame,
    expect_closed,
    request,
    wait_capacity,
    ws_connect,
)


async def test_factory_error_at_connect(broken_factory_server: RunningServer) -> None:
    # Twice, at max 1 session: a failed factory must not keep its slot.
    for _ in range(2):
        async with ws_connect(broken_factory_server.ws_url) as conn:
            frames = await expect_closed(conn)
        assert len(frames) == 1, frames
        data = assert_error(frames[0], "FACTORY_ERROR", "environment")
        assert data["factory_name"] == "broken_counter"
        assert "broken_counter" in data["message"]
        assert conn.close_code == 1000
    await wait_capacity(broken_factory_server.url, active_sessions=0, queued=0)


async def test_factory_error_over_http(broken_factory_server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=broken_factory_server.url) as http:
        assert (await http.get("/health")).json() == {"status": "healthy"}
        for call in (
            http.post("/reset"),
            http.post("/step", json={"action": {"amount": 1}}),
            http.get("/state"),
            http.get("/metadata"),
            http.post("/reset", headers={"X-OpenEnv-Session-Id": "new"}),
        ):
            response = await call
            assert response.status_code == 500, response.text
            detail = response.json()["detail"]
            assert detail["code"] == "FACTORY_ERROR"
            assert detail["category"] == "environment"
        # /schema needs no instance.
        assert (await http.get("/schema")).status_code == 200
    await wait_capacity(broken_factory_server.url, active_sessions=0, queued=0)


async def test_reset_error_over_ws_keeps_session(broken_reset_server: RunningServer) -> None:
    async with ws_connect(broken_reset_server.ws_url) as conn:
        data = assert_error(
            await request(conn, {"type": "reset", "id": "r"}),
            "EXECUTION_ERROR",
            "environment",
            has_id="r",
        )
        assert "reset exploded" in data["message"]
        step = assert_observation_frame(
            await request(conn, {"type": "step", "data": {"amount": 2}})
        )
        assert step["observation"]["count"] == 2
        assert (await request(conn, {"type": "state"}))["data"]["step_count"] == 1
        assert_error(await request(conn, {"type": "reset"}), "EXECUTION_ERROR", "environment")


async def test_reset_error_over_http(broken_reset_server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=broken_reset_server.url) as http:
        response = await http.post("/reset", json={})
        assert response.status_code == 500
        assert response.headers["content-type"].startswith("application/json")
        detail = response.json()["detail"]
        assert detail["code"] == "EXECUTION_ERROR"
        assert detail["category"] == "environment"
        assert "reset exploded" in detail["message"]

        # A session whose first reset fails is not left behind.
        response = await http.post("/reset", headers={"X-OpenEnv-Session-Id": "new"})
        assert response.status_code == 500
        assert response.json()["detail"]["code"] == "EXECUTION_ERROR"
        assert "session_id" not in response.json()
    await wait_capacity(broken_reset_server.url, active_sessions=0)
