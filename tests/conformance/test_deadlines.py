"""Server-side call deadlines: a hung environment call cannot freeze the server.

Reproduces issue 11: with `OPENENV_MAX_THREADS=4`, steps that never return used to hold every
worker thread, so every other session's step, every new reset and stateless HTTP timed out, and
the hung sessions' slots were never freed. Now each hung call gets TIMEOUT at its deadline, its
session ends (its slot is freed, later calls are told why) and its thread is replaced.

The steps hang on a gate of the slow env that nobody opens; nothing here measures time.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import httpx
import pytest

from tests.support.server import RunningServer, serve

from .conftest import server_env
from .helpers import (
    TIMEOUT,
    assert_error,
    assert_observation_frame,
    capacity,
    recv,
    request,
    send,
    wait_capacity,
    ws_connect,
)

HUNG = 4  # as many hung steps as worker threads: without replacement, nothing else runs


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    env = {
        "OPENENV_MAX_THREADS": str(HUNG),
        "MAX_CONCURRENT_ENVS": "16",
        "OPENENV_STEP_TIMEOUT": "1",
        "OPENENV_CALL_TIMEOUT": "30",
        "SLOW_STEP_MS": "0",
    }
    with serve("apps.slow:app", env=server_env(env), in_process=True) as running:
        yield running


def _hang(tag: str) -> dict[str, object]:
    """A step that blocks until a gate that is never opened (for the server: forever)."""
    return {"type": "step", "data": {"tag": tag, "hold": f"never-{uuid.uuid4()}"}}


async def test_hung_steps_time_out_and_free_their_slots(server: RunningServer) -> None:
    base = capacity(server.url)["active_sessions"]
    async with ws_connect(server.ws_url) as healthy:
        assert_observation_frame(await request(healthy, {"type": "reset"}))
        hung = [await ws_connect(server.ws_url).__aenter__() for _ in range(HUNG)]
        try:
            for i, ws in enumerate(hung):
                assert_observation_frame(await request(ws, {"type": "reset"}))
                await send(ws, _hang(f"hung-{i}"))
            for ws in hung:
                data = assert_error(await recv(ws), "TIMEOUT", "infrastructure")
                assert data["method"] == "step", data
            # The hung sessions are gone: their slots are free although their threads still hang.
            await wait_capacity(server.url, active_sessions=base + 1)

            # A later call on a hung session says why the session ended (the socket stays open).
            data = assert_error(
                await request(hung[0], {"type": "step", "data": {"tag": "after"}}),
                "SESSION_EXPIRED",
                "infrastructure",
            )
            assert data["reason"] == "call_timeout", data
            assert "hung" in data["message"], data

            # Everyone else is served: other sessions' steps, new sessions, stateless HTTP.
            step = {"type": "step", "data": {"tag": "ok"}}
            assert assert_observation_frame(await request(healthy, step))["observation"]["tag"] == (
                "ok"
            )
            async with ws_connect(server.ws_url) as fresh:
                assert_observation_frame(await request(fresh, {"type": "reset"}))
                assert_observation_frame(await request(fresh, step))
            async with httpx.AsyncClient(base_url=server.url, timeout=TIMEOUT) as http:
                reset = await http.post("/reset", json={})
                assert reset.status_code == 200, reset.text
                stepped = await http.post("/step", json={"action": {"tag": "http"}})
                assert stepped.status_code == 200, stepped.text
        finally:
            for ws in hung:
                await ws.close()
    await wait_capacity(server.url, active_sessions=base)


async def test_hung_clients_that_left_do_not_keep_their_slots(server: RunningServer) -> None:
    """The clients of hung steps disconnect before the deadline: their slots still come back."""
    base = capacity(server.url)["active_sessions"]
    for resumable in (False, True):
        url = server.ws_url + ("?resumable=1" if resumable else "")
        conns = [await ws_connect(url).__aenter__() for _ in range(2)]
        for ws in conns:
            if resumable:
                await recv(ws)
            assert_observation_frame(await request(ws, {"type": "reset"}))
            await send(ws, _hang("left"))
        await wait_capacity(server.url, active_sessions=base + 2)
        for ws in conns:
            ws.transport.abort()  # gone without a close handshake
        await wait_capacity(server.url, active_sessions=base)


async def test_http_calls_get_a_typed_timeout(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url, timeout=TIMEOUT) as http:
        base = (await http.get("/capacity")).json()["active_sessions"]
        # Stateless: a throwaway environment whose step hangs.
        hung = _hang("stateless")["data"]
        response = await http.post("/step", json={"action": hung})
        assert response.status_code == 504, response.text
        detail = response.json()["detail"]
        assert (detail["code"], detail["category"]) == ("TIMEOUT", "infrastructure"), detail

        # An HTTP session: the hung step ends it and frees its slot; later calls learn why.
        opened = await http.post("/reset", json={}, headers={"X-OpenEnv-Session-Id": "new"})
        assert opened.status_code == 200, opened.text
        sid = opened.json()["session_id"]
        headers = {"X-OpenEnv-Session-Id": sid}
        response = await http.post(
            "/step", json={"action": _hang("session")["data"]}, headers=headers
        )
        assert response.status_code == 504, response.text
        assert response.json()["detail"]["code"] == "TIMEOUT"
        assert (await http.get("/capacity")).json()["active_sessions"] == base
        later = await http.post("/step", json={"action": {"tag": "later"}}, headers=headers)
        assert later.status_code == 410, later.text
        assert later.json()["detail"]["reason"] == "call_timeout"


async def test_a_resent_request_gets_the_timeout_again(server: RunningServer) -> None:
    """A resumable session stores the TIMEOUT outcome like any other: no step is re-applied."""
    async with ws_connect(server.ws_url + "?resumable=1") as ws:
        await recv(ws)  # the session frame
        assert_observation_frame(await request(ws, {"type": "reset"}))
        message = {**_hang("resent"), "id": "r1"}
        assert_error(await request(ws, message), "TIMEOUT", has_id="r1")
        assert_error(await request(ws, message), "TIMEOUT", has_id="r1")


async def test_many_hung_calls_do_not_exhaust_the_server(server: RunningServer) -> None:
    """More hung calls than threads, in waves: each wave times out and the next is served."""
    for wave in range(3):
        conns = [await ws_connect(server.ws_url).__aenter__() for _ in range(HUNG + 1)]
        try:
            for ws in conns:
                assert_observation_frame(await request(ws, {"type": "reset"}))
            await asyncio.gather(*(send(ws, _hang(f"wave-{wave}")) for ws in conns))
            for ws in conns:
                assert_error(await recv(ws), "TIMEOUT", "infrastructure")
        finally:
            for ws in conns:
                await ws.close()


@pytest.fixture(scope="module")
def tools_server() -> Iterator[RunningServer]:
    """An MCP environment whose `sleep` tool is async: a deadline cancels it."""
    env = {"OPENENV_STEP_TIMEOUT": "1", "MAX_CONCURRENT_ENVS": "4"}
    with serve("mcp_apps.tools:app", env=env, in_process=True) as running:
        yield running


async def test_a_hung_async_step_is_cancelled(tools_server: RunningServer) -> None:
    forever = {"type": "call_tool", "tool_name": "sleep", "arguments": {"seconds": 3600}}
    async with ws_connect(tools_server.ws_url) as ws:
        assert_observation_frame(await request(ws, {"type": "reset"}))
        data = assert_error(await request(ws, {"type": "step", "data": forever}), "TIMEOUT")
        assert data["category"] == "infrastructure", data
        assert_error(await request(ws, {"type": "state"}), "SESSION_EXPIRED")
    await wait_capacity(tools_server.url, active_sessions=0)
    async with ws_connect(tools_server.ws_url) as ws:  # the server goes on serving
        assert_observation_frame(await request(ws, {"type": "reset"}))


async def test_mcp_tool_calls_have_the_step_deadline(tools_server: RunningServer) -> None:
    call = {"name": "sleep", "arguments": {"seconds": 3600}}
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": call}
    async with httpx.AsyncClient(base_url=tools_server.url, timeout=TIMEOUT) as http:
        reply = (await http.post("/mcp", json=body)).json()
        assert reply["id"] == 7 and "error" in reply, reply
        assert reply["error"]["data"]["code"] == "TIMEOUT", reply
        assert reply["error"]["data"]["category"] == "infrastructure", reply
        quick = {**body, "params": {"name": "add", "arguments": {"a": 1, "b": 2}}}
        assert "result" in (await http.post("/mcp", json=quick)).json()


@pytest.fixture(scope="module")
def stubborn_server() -> Iterator[RunningServer]:
    env = {"OPENENV_STEP_TIMEOUT": "1", "MAX_CONCURRENT_ENVS": "4"}
    with serve("apps.stubborn:app", env=env, in_process=True) as running:
        yield running


def _stubborn_step(mode: str) -> dict[str, object]:
    return {"type": "step", "data": {"mode": mode}}


async def test_an_async_step_that_ignores_its_cancel_still_times_out(
    stubborn_server: RunningServer,
) -> None:
    """An async step that swallows the cancellation of its deadline is left behind in its own
    task: its client gets TIMEOUT all the same, its slot is freed, other sessions are not held
    up, and the step finishes on its own afterwards."""
    async with ws_connect(stubborn_server.ws_url) as other:
        assert_observation_frame(await request(other, {"type": "reset"}))
        async with ws_connect(stubborn_server.ws_url) as ws:
            assert_observation_frame(await request(ws, {"type": "reset"}))
            data = assert_error(await request(ws, _stubborn_step("stubborn")), "TIMEOUT")
            assert data["category"] == "infrastructure", data
            assert_error(await request(ws, {"type": "state"}), "SESSION_EXPIRED")
        await wait_capacity(stubborn_server.url, active_sessions=1)
        # The other session was never held up, and the step left behind ran to its end.
        for mode in ("quick", "wait"):
            obs = assert_observation_frame(await request(other, _stubborn_step(mode)))
            assert obs["observation"]["mode"] == mode
        for _ in range(200):
            obs = assert_observation_frame(await request(other, _stubborn_step("wait")))
            if obs["observation"]["finished_after_cancel"] >= 1:
                break
            await asyncio.sleep(0.05)
        assert obs["observation"]["finished_after_cancel"] >= 1, obs


async def test_an_async_step_that_honours_its_cancel_times_out(
    stubborn_server: RunningServer,
) -> None:
    async with ws_connect(stubborn_server.ws_url) as ws:
        assert_observation_frame(await request(ws, {"type": "reset"}))
        assert_observation_frame(await request(ws, _stubborn_step("quick")))
        assert_error(await request(ws, _stubborn_step("honest")), "TIMEOUT", "infrastructure")
    await wait_capacity(stubborn_server.url, active_sessions=0)
    async with ws_connect(stubborn_server.ws_url) as ws:  # the server goes on serving
        assert_observation_frame(await request(ws, {"type": "reset"}))
        assert_observation_frame(await request(ws, _stubborn_step("wait")))
