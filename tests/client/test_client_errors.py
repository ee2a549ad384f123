"""Typed client errors from real error frames, and who is at fault."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import pytest

from openenv.core.env_client import EnvClient
from openenv.core.errors import (
    CapacityReachedError,
    EnvironmentExecutionError,
    InvalidRequestError,
    OpenEnvError,
    is_infrastructure_error,
)
from openenv.core.generic_client import GenericEnvClient
from tests.client.conftest import COUNTER_APP
from tests.client_apps.counter import CounterAction, CounterObservation, CounterState
from tests.support.server import RunningServer, free_port, serve


class CounterClient(EnvClient[CounterAction, CounterObservation, CounterState]):
    pass


@pytest.fixture(scope="module")
def single_slot_server() -> Iterator[RunningServer]:
    env = {"MAX_CONCURRENT_ENVS": "1", "OPENENV_QUEUE_TIMEOUT": "0.3"}
    with serve(COUNTER_APP, env=env, in_process=True) as server:
        yield server


async def test_invalid_action_is_a_client_error(counter_server):
    async with GenericEnvClient(base_url=counter_server.url) as client:
        await client.reset()
        for bad in ({"delta": "not a number"}, {"delta": 1, "bogus": True}):
            with pytest.raises(InvalidRequestError) as info:
                await client.step(bad)
            err = info.value
            assert err.code == "VALIDATION_ERROR"
            assert err.category == "client"
            assert not is_infrastructure_error(err)
            assert isinstance(err, RuntimeError)  # OpenEnv clients catch RuntimeError
        # Nothing was applied and the session still works.
        state = await client.state()
        assert state["applied_steps"] == 0
        assert (await client.step({"delta": 2})).observation["value"] == 2


async def test_environment_exception_is_an_environment_error(counter_server):
    async with CounterClient(base_url=counter_server.url) as client:
        await client.reset()
        await client.step(CounterAction(delta=1))
        with pytest.raises(EnvironmentExecutionError) as info:
            await client.step(CounterAction(delta=100, fail=True))
        err = info.value
        assert err.code == "EXECUTION_ERROR"
        assert err.category == "environment"
        assert not is_infrastructure_error(err)
        assert "counter asked to fail" in err.message
        # The session survives the failure with its episode intact.
        result = await client.step(CounterAction(delta=2))
        assert result.observation.value == 3
        state = await client.state()
        assert state.history == [1, 2]
        assert state.applied_steps == 2


async def test_capacity_reached(single_slot_server):
    url = single_slot_server.url
    async with CounterClient(base_url=url) as first:
        await first.reset()
        # Well below the 30 s default queue timeout, which an ignored setting would wait.
        second = CounterClient(base_url=url, message_timeout_s=15)
        try:
            started = time.monotonic()
            with pytest.raises(CapacityReachedError) as info:
                await second.connect()
                await second.reset()
            waited = time.monotonic() - started
            err = info.value
            assert err.code == "CAPACITY_REACHED"
            assert err.category == "infrastructure"
            assert is_infrastructure_error(err)
            assert err.retryable is True
            assert waited >= 0.25  # it queued for OPENENV_QUEUE_TIMEOUT first
        finally:
            await second.close()
        # The first client is unaffected.
        assert (await first.step(CounterAction(delta=1))).observation.value == 1
    # Once the slot is free, a new client gets it.
    async with CounterClient(base_url=url) as third:
        assert (await third.reset()).observation.note == "reset"


async def test_capacity_error_arriving_before_the_first_request(single_slot_server):
    url = single_slot_server.url
    async with CounterClient(base_url=url) as first:
        await first.reset()
        # Well below the 30 s default queue timeout, which an ignored setting would wait.
        second = CounterClient(base_url=url, message_timeout_s=15)
        try:
            await second.connect()
            await asyncio.sleep(0.6)  # the refusal arrives while nothing is pending
            with pytest.raises(CapacityReachedError):
                await second.reset()
        finally:
            await second.close()


async def test_capacity_reached_sync_client(single_slot_server):
    url = single_slot_server.url
    async with CounterClient(base_url=url) as first:
        await first.reset()

        def use_second() -> None:
            with CounterClient(base_url=url).sync() as second:
                second.reset()

        with pytest.raises(CapacityReachedError):
            await asyncio.to_thread(use_second)
    async with httpx.AsyncClient(timeout=5) as http:
        assert (await http.get(f"{url}/capacity")).json()["active_sessions"] == 0


async def test_connect_to_closed_port_raises_connection_error():
    port = free_port()  # nothing listens there
    client = CounterClient(base_url=f"http://127.0.0.1:{port}", connect_timeout_s=2)
    with pytest.raises(ConnectionError) as info:
        await client.connect()
    assert is_infrastructure_error(info.value)
    assert not isinstance(info.value, OpenEnvError) or info.value.category == "infrastructure"
    # A request also surfaces it (the client connects on demand).
    with pytest.raises(ConnectionError):
        await client.reset()
    await client.close()
