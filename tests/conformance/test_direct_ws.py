"""`/ws` served ahead of FastAPI's router (`asgi.DirectWebSocketRoutes`), against real servers.

Everything else about `/ws` (auth, origins, resume, floods, close codes) is covered by the
other conformance tests, which now all go through this path; these cover what the direct route
itself decides: which sockets it takes, a `root_path`, and frames that arrive together.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import websockets

from openenv.core.env_server.runner import uvicorn_options
from tests.conformance.helpers import assert_observation_frame, request, ws_connect
from tests.conformance.raw_ws import RawClient
from tests.support.server import RunningServer, serve


@pytest.fixture(scope="module")
def prefixed_server() -> Iterator[RunningServer]:
    """The counter env behind `root_path` "/prefix", served as `openenv serve` does."""
    options = {**uvicorn_options(), "root_path": "/prefix"}
    with serve("apps.counter:app", in_process=True, options=options) as server:
        yield server


async def test_ws_under_a_root_path_steps(prefixed_server: RunningServer) -> None:
    async with ws_connect(prefixed_server.ws_url) as ws:
        assert_observation_frame(await request(ws, {"type": "reset", "data": {}}))
        reply = await request(ws, {"type": "step", "data": {"amount": 2}})
        assert assert_observation_frame(reply)["observation"]["count"] == 2


async def test_other_websocket_paths_still_reach_the_router(
    prefixed_server: RunningServer,
) -> None:
    with pytest.raises(websockets.InvalidStatus) as refused:
        async with ws_connect(prefixed_server.ws_url + "-not-a-route"):
            pass
    assert refused.value.response.status_code == 403  # Starlette's answer for no route


async def test_frames_sent_together_are_all_answered_in_order(
    prefixed_server: RunningServer,
) -> None:
    """Several frames in one TCP write are queued at once: each gets its reply, in order (the
    handler yields to other connections between them)."""
    raw = await asyncio.to_thread(RawClient, prefixed_server, "")
    try:
        frames = [RawClient.frame({"type": "reset", "data": {}, "id": "r"})]
        frames += [
            RawClient.frame({"type": "step", "data": {"amount": 1}, "id": f"s{i}"})
            for i in range(8)
        ]
        await asyncio.to_thread(raw.sock.sendall, b"".join(frames))
        replies = [await asyncio.to_thread(raw.read_frame) for _ in range(9)]
    finally:
        raw.sock.close()
    assert [r["id"] for r in replies] == ["r"] + [f"s{i}" for i in range(8)]
    assert all(r["type"] == "observation" for r in replies)
    counts = [r["data"]["observation"]["count"] for r in replies]
    assert counts == list(range(9))
