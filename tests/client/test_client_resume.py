"""Resume through a cuttable TCP proxy: no step lost or doubled, the same session continues."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import pytest

from openenv.core.env_client import EnvClient
from openenv.core.errors import (
    ConnectionLostError,
    SessionLostError,
    is_infrastructure_error,
)
from tests.client.conftest import COUNTER_APP
from tests.client.tcp_proxy import TcpProxy
from tests.client_apps.counter import CounterAction, CounterObservation, CounterState
from tests.support.server import RunningServer, serve


class CounterClient(EnvClient[CounterAction, CounterObservation, CounterState]):
    pass


def _client(url: str, **kwargs) -> CounterClient:
    kwargs.setdefault("reconnect_backoff_s", 0.05)
    kwargs.setdefault("message_timeout_s", 15.0)
    return CounterClient(base_url=url, **kwargs)


@pytest.fixture(scope="module")
def short_grace_server() -> Iterator[RunningServer]:
    with serve(COUNTER_APP, env={"OPENENV_RESUME_GRACE": "0.5"}, in_process=True) as server:
        yield server


async def _wait_for(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


async def test_cut_between_steps(counter_server):
    async with TcpProxy(counter_server.port) as proxy, _client(proxy.url) as client:
        await client.reset(episode_id="resume-idle")
        session = client.session_id
        assert session
        assert client.supports_resume
        deltas = [1, 2, 3, 4, 5, 6]
        for i, delta in enumerate(deltas):
            result = await client.step(CounterAction(delta=delta))
            assert result.observation.applied_steps == i + 1
            if i in (1, 3):
                assert proxy.cut() == 1
                await asyncio.sleep(0.2)  # let the client notice and reconnect
        state = await client.state()
        assert state.episode_id == "resume-idle"
        assert state.history == deltas
        assert state.applied_steps == len(deltas)
        assert state.value == sum(deltas)
        assert client.session_id == session
        assert proxy.accepted == 3  # the first connection plus one per cut


async def test_cut_right_before_a_request(counter_server):
    """The request is sent into a connection that is already dead; it is re-sent once."""
    async with TcpProxy(counter_server.port) as proxy, _client(proxy.url) as client:
        await client.reset()
        session = client.session_id
        for delta in (1, 2, 3):
            proxy.cut()
            result = await client.step(CounterAction(delta=delta))
            assert result.observation.note == f"added {delta}"
        state = await client.state()
        assert state.history == [1, 2, 3]
        assert state.applied_steps == 3
        assert client.session_id == session


async def test_cut_while_a_step_is_in_flight(counter_server):
    async with TcpProxy(counter_server.port) as proxy, _client(proxy.url) as client:
        await client.reset()
        await client.step(CounterAction(delta=1))
        session = client.session_id
        step = asyncio.create_task(client.step(CounterAction(delta=10, sleep_s=1.0)))
        await asyncio.sleep(0.3)  # the server is inside step() now
        assert not step.done()
        assert proxy.cut() == 1
        result = await step
        assert result.observation.value == 11
        assert result.observation.applied_steps == 2
        assert result.observation.note == "added 10"
        state = await client.state()
        assert state.history == [1, 10]  # applied exactly once
        assert state.applied_steps == 2
        assert client.session_id == session
        # The episode goes on.
        assert (await client.step(CounterAction(delta=5))).observation.value == 16


async def test_cut_after_the_step_finished_but_before_the_reply_is_read(counter_server):
    """The reply is lost with the connection; the re-sent id gets the stored reply."""
    async with TcpProxy(counter_server.port) as proxy, _client(proxy.url) as client:
        await client.reset()
        step = asyncio.create_task(client.step(CounterAction(delta=3, sleep_s=0.6)))
        await asyncio.sleep(0.2)
        proxy.freeze()  # the reply will be swallowed...
        await asyncio.sleep(0.8)  # ...the step finishes on the server meanwhile
        proxy.cut()  # then the link dies
        result = await step
        assert result.observation.value == 3
        state = await client.state()
        assert state.history == [3]
        assert state.applied_steps == 1


async def test_several_cuts_with_steps_in_flight(counter_server):
    async with TcpProxy(counter_server.port) as proxy, _client(proxy.url) as client:
        await client.reset()
        session = client.session_id
        expected: list[int] = []
        for delta in (1, 2, 3):
            step = asyncio.create_task(client.step(CounterAction(delta=delta, sleep_s=0.4)))
            await asyncio.sleep(0.15)
            proxy.cut()
            result = await step
            expected.append(delta)
            assert result.observation.applied_steps == len(expected)
        state = await client.state()
        assert state.history == expected
        assert client.session_id == session


async def test_reset_and_state_survive_a_cut(counter_server):
    async with TcpProxy(counter_server.port) as proxy, _client(proxy.url) as client:
        await client.reset(episode_id="first")
        await client.step(CounterAction(delta=4))
        proxy.cut()
        reset = await client.reset(episode_id="second")
        assert reset.observation.note == "reset"
        proxy.cut()
        state = await client.state()
        assert state.episode_id == "second"
        assert state.applied_steps == 0


async def test_resumed_session_keeps_one_slot(counter_server):
    url = counter_server.url

    def active() -> int:
        return httpx.get(f"{url}/capacity", timeout=5).json()["active_sessions"]

    before = active()
    async with TcpProxy(counter_server.port) as proxy, _client(proxy.url) as client:
        await client.reset()
        for _ in range(3):
            proxy.cut()
            await client.step(CounterAction(delta=1))
        assert active() == before + 1
    await _wait_for(lambda: active() == before)


async def test_session_lost_after_grace_while_a_step_is_pending(short_grace_server):
    async with TcpProxy(short_grace_server.port) as proxy:
        client = _client(proxy.url, max_reconnect_attempts=8, reconnect_backoff_s=0.1)
        try:
            await client.reset()
            await client.step(CounterAction(delta=1))
            step = asyncio.create_task(client.step(CounterAction(delta=2, sleep_s=0.2)))
            await asyncio.sleep(0.05)
            proxy.down = True
            proxy.cut()
            await asyncio.sleep(1.5)  # longer than OPENENV_RESUME_GRACE=0.5
            proxy.down = False
            with pytest.raises((SessionLostError, ConnectionLostError)) as info:
                await asyncio.wait_for(step, 15)
            assert is_infrastructure_error(info.value)
            assert info.value.retryable or isinstance(info.value, SessionLostError)
        finally:
            await client.close()


async def test_session_lost_after_grace_surfaces_on_the_next_call(short_grace_server):
    """An idle client whose session expired must not silently continue in a new session."""
    async with TcpProxy(short_grace_server.port) as proxy:
        client = _client(proxy.url, max_reconnect_attempts=8, reconnect_backoff_s=0.1)
        try:
            await client.reset()
            await client.step(CounterAction(delta=1))
            await client.step(CounterAction(delta=2))
            session = client.session_id
            proxy.down = True
            proxy.cut()
            await asyncio.sleep(1.5)  # longer than OPENENV_RESUME_GRACE=0.5
            proxy.down = False
            await asyncio.sleep(1.5)  # the client's reconnect attempts reach the server
            try:
                result = await asyncio.wait_for(client.step(CounterAction(delta=3)), 15)
            except (SessionLostError, ConnectionLostError) as exc:
                assert is_infrastructure_error(exc)
            else:
                pytest.fail(
                    "the step after a lost session silently ran in a new session "
                    f"{client.session_id} (was {session}) on a fresh environment: "
                    f"value={result.observation.value}, "
                    f"applied_steps={result.observation.applied_steps} (the episode had 2)"
                )
        finally:
            await client.close()


async def test_session_lost_when_the_server_stays_unreachable(short_grace_server):
    async with TcpProxy(short_grace_server.port) as proxy:
        client = _client(proxy.url, max_reconnect_attempts=3, reconnect_backoff_s=0.05)
        try:
            await client.reset()
            proxy.down = True
            proxy.cut()
            with pytest.raises((SessionLostError, ConnectionLostError)) as info:
                await asyncio.wait_for(client.step(CounterAction(delta=1)), 15)
            assert is_infrastructure_error(info.value)
        finally:
            await client.close()


async def test_resume_disabled_loses_the_session(counter_server):
    async with TcpProxy(counter_server.port) as proxy:
        client = _client(proxy.url, resume=False)
        try:
            await client.reset()
            await client.step(CounterAction(delta=1))
            step = asyncio.create_task(client.step(CounterAction(delta=2, sleep_s=0.5)))
            await asyncio.sleep(0.1)
            proxy.cut()
            with pytest.raises((SessionLostError, ConnectionLostError)) as info:
                await asyncio.wait_for(step, 10)
            assert is_infrastructure_error(info.value)
        finally:
            await client.close()


async def test_mcp_production_client_resumes_its_session(echo_server):
    """MCPToolClient in production mode: the WebSocket is attached to the /mcp session and
    comes back to it after a cut; steps are counted once."""
    from echo_env import CallToolAction, EchoEnv

    async with TcpProxy(echo_server.port) as proxy:
        async with EchoEnv(base_url=proxy.url, reconnect_backoff_s=0.05) as client:
            await client.reset()
            session = client.session_id
            hello = CallToolAction(tool_name="echo_message", arguments={"message": "hi"})
            for _ in range(3):
                assert (await client.step(hello)).observation.result["data"] == "hi"
                proxy.cut()
            assert (await client.state()).step_count == 3
            assert client.session_id == session
            # HTTP tool calls still reach the same session after the cuts.
            created = await client.mcp_request("openenv/session/create")
            assert created["result"]["session_id"] == session
            assert await client.call_tool("echo_message", message="after") == "after"
