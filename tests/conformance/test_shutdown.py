"""SIGTERM with an open session: the env is closed and the client sees the connection end."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from pathlib import Path

import pytest
from websockets.exceptions import ConnectionClosed

from tests.support.server import serve

from .conftest import closed_episodes, server_env
from .helpers import assert_observation_frame, request, ws_connect


@pytest.mark.parametrize("resumable", [False, True], ids=["plain", "resumable"])
async def test_sigterm_closes_sessions_and_envs(tmp_path: Path, resumable: bool) -> None:
    marker = tmp_path / "closed.txt"
    marker.touch()
    env = {
        "OPENENV_TEST_CLOSE_MARKER": str(marker),
        "MAX_CONCURRENT_ENVS": "4",
        "OPENENV_RESUME_GRACE": "60",
    }
    with serve("apps.counter:app", env=server_env(env)) as server:
        url = server.ws_url + ("?resumable=1" if resumable else "")
        async with ws_connect(url) as a, ws_connect(url) as b:
            if resumable:
                await a.recv()
                await b.recv()
            await request(a, {"type": "reset", "data": {"episode_id": "shut-a"}})
            await request(b, {"type": "reset", "data": {"episode_id": "shut-b"}})
            assert_observation_frame(await request(a, {"type": "step", "data": {"amount": 1}}))
            expected = ["shut-a", "shut-b"]
            if resumable:
                # A dropped resumable session waiting for its client is closed too.
                async with ws_connect(url) as c:
                    await c.recv()
                    await request(c, {"type": "reset", "data": {"episode_id": "shut-c"}})
                    c.transport.abort()
                expected.append("shut-c")
                await asyncio.sleep(0.2)
                assert closed_episodes(marker) == []

            server.process.send_signal(signal.SIGTERM)
            for conn in (a, b):
                with pytest.raises(ConnectionClosed):
                    await asyncio.wait_for(conn.recv(), 10)
                assert conn.close_code in (1001, 1012), conn.close_code
            returncode = await asyncio.to_thread(server.process.wait, 60)
        # uvicorn re-raises the signal after a graceful shutdown.
        assert returncode in (0, -signal.SIGTERM), returncode
    assert sorted(closed_episodes(marker)) == expected


async def test_sigterm_with_a_queued_connection_exits_promptly(tmp_path: Path) -> None:
    """A connection waiting for a slot must not hold up shutdown until its queue timeout."""
    marker = tmp_path / "closed.txt"
    marker.touch()
    env = {
        "OPENENV_TEST_CLOSE_MARKER": str(marker),
        "MAX_CONCURRENT_ENVS": "1",
        "OPENENV_QUEUE_TIMEOUT": "600",
        "OPENENV_RESUME_GRACE": "60",
    }
    with serve("apps.counter:app", env=server_env(env)) as server:
        async with (
            ws_connect(server.ws_url + "?resumable=1") as holder,
            ws_connect(server.ws_url) as waiter,
        ):
            await holder.recv()
            await request(holder, {"type": "reset", "data": {"episode_id": "holder"}})
            await waiter.send('{"type": "reset"}')
            await asyncio.sleep(0.3)

            server.process.send_signal(signal.SIGTERM)
            for conn in (holder, waiter):
                with pytest.raises(ConnectionClosed):
                    await asyncio.wait_for(conn.recv(), 10)
            try:  # far less than the queue timeout, which a held-up shutdown would wait for
                await asyncio.to_thread(server.process.wait, 60)
            except subprocess.TimeoutExpired:
                server.process.kill()
                pytest.fail("server still running 60 s after SIGTERM")
    assert closed_episodes(marker) == ["holder"]
