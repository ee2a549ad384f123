"""Message, connect and keepalive timeouts."""

from __future__ import annotations

import asyncio
import inspect
import time

import pytest

from openenv.core.env_client import EnvClient
from openenv.core.errors import (
    OpenEnvError,
    RequestTimeoutError,
    is_infrastructure_error,
)
from tests.client.tcp_proxy import SilentServer, TcpProxy
from tests.client_apps.counter import CounterAction, CounterObservation, CounterState


class CounterClient(EnvClient[CounterAction, CounterObservation, CounterState]):
    pass


#: EnvClient's default connect timeout: a test that hits it did not honour its own setting.
DEFAULT_CONNECT_TIMEOUT_S = inspect.signature(EnvClient).parameters["connect_timeout_s"].default


async def test_message_timeout_then_next_reply_is_its_own(counter_server):
    async with CounterClient(base_url=counter_server.url, message_timeout_s=30.0) as client:
        await client.reset()
        client.message_timeout_s = 0.5  # only for the slow step: its reply comes 2 s later
        started = time.monotonic()
        with pytest.raises(RequestTimeoutError) as info:
            await client.step(CounterAction(delta=7, sleep_s=2.0))
        assert time.monotonic() - started >= 0.4  # not before its timeout
        assert isinstance(info.value, TimeoutError)
        assert is_infrastructure_error(info.value)

        # The late step reply arrives first; the state request must still get the state.
        client.message_timeout_s = 10.0
        state = await client.state()
        assert type(state) is CounterState
        assert not state.model_extra  # not an observation payload parsed as a state
        assert state.applied_steps == 1  # the slow step did run on the server, once
        assert state.history == [7]

        # And the following step gets its own observation.
        result = await client.step(CounterAction(delta=1))
        assert result.observation.value == 8
        assert result.observation.applied_steps == 2
        assert result.observation.note == "added 1"


async def test_message_timeout_then_step_reply_not_shifted(counter_server):
    async with CounterClient(base_url=counter_server.url, message_timeout_s=30.0) as client:
        await client.reset()
        client.message_timeout_s = 0.4  # only for the slow step
        with pytest.raises(RequestTimeoutError):
            await client.step(CounterAction(delta=1, sleep_s=1.0))
        client.message_timeout_s = 10.0
        # The very next step must not be answered with the late reply to the timed-out one.
        result = await client.step(CounterAction(delta=10))
        assert result.observation.note == "added 10"
        assert result.observation.value == 11
        # Replies stay aligned afterwards.
        for delta, expected in ((100, 111), (-11, 100)):
            assert (await client.step(CounterAction(delta=delta))).observation.value == expected


async def test_connect_timeout_is_honoured():
    async with SilentServer() as silent:
        for timeout in (0.3, 1.0):
            client = CounterClient(
                base_url=f"http://127.0.0.1:{silent.port}", connect_timeout_s=timeout
            )
            started = time.monotonic()
            with pytest.raises(ConnectionError) as info:  # not the 10 s default: wait_for's 8 s
                await asyncio.wait_for(client.connect(), DEFAULT_CONNECT_TIMEOUT_S - 2)
            assert time.monotonic() - started >= timeout * 0.8, timeout  # not before it
            assert is_infrastructure_error(info.value)
            await client.close()
        assert silent.accepted >= 2  # TCP was accepted; only the handshake hung


async def test_connect_timeout_also_bounds_requests_that_connect():
    async with SilentServer() as silent:
        client = CounterClient(base_url=f"http://127.0.0.1:{silent.port}", connect_timeout_s=0.3)
        with pytest.raises((ConnectionError, OpenEnvError)):  # before the 10 s default's end
            await asyncio.wait_for(client.reset(), DEFAULT_CONNECT_TIMEOUT_S - 2)
        await client.close()


async def test_keepalive_detects_a_black_hole_and_resumes(counter_server):
    """A connection that silently stops carrying bytes is found by the ping and replaced."""
    async with TcpProxy(counter_server.port) as proxy:
        client = CounterClient(
            base_url=proxy.url,
            ping_interval_s=0.2,
            ping_timeout_s=0.3,
            # Longer than the test may run: only the 0.2 s ping can find the black hole.
            message_timeout_s=600.0,
            reconnect_backoff_s=0.05,
        )
        async with client:
            await client.reset()
            await client.step(CounterAction(delta=1))
            session = client.session_id
            proxy.freeze()  # the live connection becomes a black hole
            result = await client.step(CounterAction(delta=2))
            assert result.observation.value == 3
            assert proxy.accepted >= 2  # it reconnected
            assert client.session_id == session
            state = await client.state()
            assert state.history == [1, 2]


async def test_keepalive_can_be_disabled(counter_server):
    """With pings off, a black hole is only ended by the message timeout."""
    async with TcpProxy(counter_server.port) as proxy:
        client = CounterClient(
            base_url=proxy.url, ping_interval_s=None, ping_timeout_s=None, message_timeout_s=30.0
        )
        async with client:
            await client.reset()
            client.message_timeout_s = 1.0
            proxy.freeze()
            started = time.monotonic()
            with pytest.raises(RequestTimeoutError):
                await client.step(CounterAction(delta=2))
            assert time.monotonic() - started >= 0.9
            assert proxy.accepted == 1  # nothing noticed the dead link
            proxy.cut()
