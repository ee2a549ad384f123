"""SIGTERM: in-flight calls reply, clients are told to reconnect elsewhere, the server exits.

Each test runs a server process and sends it a real SIGTERM.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
from pathlib import Path

import httpx
import pytest
from websockets.exceptions import ConnectionClosed

from tests.support.server import serve

from .conftest import closed_episodes, server_env
from .helpers import (
    assert_error,
    assert_observation_frame,
    expect_closed,
    recv,
    request,
    send,
    ws_connect,
)

#: Sleep of the steps in flight at SIGTERM: they are mid-sleep when the signal arrives (the
#: test sends it as soon as a third step met them), and they must still reply.
IN_FLIGHT_MS = 3000
#: Exit bound with hung calls: far above the grace period, below the 60 s after which the slow
#: env's gates give up (a server that waits for its hung calls exits only then).
HUNG_EXIT_BOUND_S = 40


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
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(holder.recv(), 10)
            # The queued connection is told why it gets no session, then closed.
            for frame in await expect_closed(waiter, 10):
                assert_error(frame, "CAPACITY_REACHED", "infrastructure")
            try:  # far less than the queue timeout, which a held-up shutdown would wait for
                await asyncio.to_thread(server.process.wait, 60)
            except subprocess.TimeoutExpired:
                server.process.kill()
                pytest.fail("server still running 60 s after SIGTERM")
    assert closed_episodes(marker) == ["holder"]


async def test_sigterm_delivers_the_replies_of_calls_in_flight() -> None:
    env = {"MAX_CONCURRENT_ENVS": "8", "OPENENV_SHUTDOWN_GRACE": "30", "SLOW_STEP_MS": "0"}
    with serve("apps.slow:app", env=server_env(env)) as server:
        async with (
            ws_connect(server.ws_url) as plain,
            ws_connect(server.ws_url + "?resumable=1") as resumable,
            ws_connect(server.ws_url) as witness,
        ):
            await recv(resumable)  # the session frame
            for ws in (plain, resumable, witness):
                assert_observation_frame(await request(ws, {"type": "reset"}))
            meet = {"meet": "sigterm", "parties": 3}
            slow = {**meet, "delay_ms": IN_FLIGHT_MS}
            await send(plain, {"type": "step", "data": {"tag": "plain", **slow}})
            await send(resumable, {"type": "step", "data": {"tag": "r", **slow}, "id": "r1"})
            # The witness's step returns once all three met: the other two are now in flight.
            await request(witness, {"type": "step", "data": {"tag": "witness", **meet}})

            server.process.send_signal(signal.SIGTERM)
            # While draining, the server takes no new session.
            async with httpx.AsyncClient(timeout=10) as http:
                for _ in range(200):
                    try:
                        health = await http.get(f"{server.url}/health")
                    except httpx.TransportError:
                        break  # no longer listening
                    if health.status_code == 503:
                        assert health.json() == {"status": "draining"}
                        break
                    await asyncio.sleep(0.02)
            for ws, rid in ((plain, None), (resumable, "r1")):
                frames = await expect_closed(ws)
                assert [f.get("id") for f in frames] == [rid], frames
                assert frames[0]["type"] == "observation", frames
                # 1012 "service restart": this server is going away, reconnect elsewhere.
                assert ws.close_code == 1012, ws.close_code
                assert "another server" in (ws.close_reason or ""), ws.close_reason
            returncode = await asyncio.to_thread(server.process.wait, 60)
        assert returncode in (0, -signal.SIGTERM), returncode


async def test_sigterm_with_hung_calls_exits_after_the_grace_period() -> None:
    env = {
        "MAX_CONCURRENT_ENVS": "8",
        "OPENENV_MAX_THREADS": "8",
        "OPENENV_SHUTDOWN_GRACE": "1",
        "SLOW_STEP_MS": "0",
    }
    with serve("apps.slow:app", env=server_env(env)) as server:
        conns = [await ws_connect(server.ws_url).__aenter__() for _ in range(4)]
        try:
            for ws in conns:
                assert_observation_frame(await request(ws, {"type": "reset"}))
            for i, ws in enumerate(conns[:3]):  # blocked on a gate nobody opens
                await send(ws, {"type": "step", "data": {"tag": f"hung-{i}", "hold": "never"}})
            await request(conns[3], {"type": "step", "data": {"tag": "w", "after_held": "never"}})

            server.process.send_signal(signal.SIGTERM)
            try:
                returncode = await asyncio.to_thread(server.process.wait, HUNG_EXIT_BOUND_S)
            except subprocess.TimeoutExpired:
                server.process.kill()
                pytest.fail(f"server still running {HUNG_EXIT_BOUND_S} s after SIGTERM")
            assert returncode in (0, -signal.SIGTERM), returncode
            for ws in conns[:3]:  # each hung call was answered before its connection closed
                frames = await expect_closed(ws)
                assert len(frames) == 1, frames
                data = assert_error(frames[0], "TIMEOUT", "infrastructure")
                assert "shut down" in data["message"], data
        finally:
            for ws in conns:
                await ws.close()


async def test_a_resuming_client_is_told_the_server_went_away() -> None:
    """Our client does not try to resume on a server that closed with 1012: the session is gone
    and the error says so (infrastructure, retryable); reset() would open a new session."""
    from openenv.core.env_client import EnvClient
    from openenv.core.errors import ConnectionLostError, SessionLostError, is_infrastructure_error
    from tests.client_apps.counter import CounterAction, CounterObservation, CounterState

    class Client(EnvClient[CounterAction, CounterObservation, CounterState]):
        pass

    env = server_env({"OPENENV_RESUME_GRACE": "60"})
    with serve("client_apps.counter:app", env=env) as server:
        async with Client(base_url=server.url, reconnect_backoff_s=0.05) as client:
            await client.reset()
            await client.step(CounterAction(delta=1))
            assert client.supports_resume
            server.process.send_signal(signal.SIGTERM)
            returncode = await asyncio.to_thread(server.process.wait, 60)
            assert returncode in (0, -signal.SIGTERM), returncode
            with pytest.raises((ConnectionLostError, SessionLostError)) as caught:
                await client.step(CounterAction(delta=1))
            assert is_infrastructure_error(caught.value)
            assert "server shut down" in str(caught.value), caught.value
            assert client.session_id is None
