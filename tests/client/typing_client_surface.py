"""Checked by mypy in CI (not collected by pytest): the sync wrapper keeps the client's types."""

from __future__ import annotations

from typing import Any

from typing_extensions import assert_type

from openenv.core import EnvClient
from openenv.core.client_types import StepResult
from openenv.core.sync_client import SyncEnvClient
from tests.client_apps.counter import CounterAction, CounterObservation, CounterState


class CounterClient(EnvClient[CounterAction, CounterObservation, CounterState]):
    pass


def sync_types(client: CounterClient) -> None:
    env = client.sync()
    assert_type(env, SyncEnvClient[CounterAction, CounterObservation, CounterState])
    assert_type(env.reset(seed=1), StepResult[CounterObservation])
    assert_type(env.step(CounterAction(delta=1)), StepResult[CounterObservation])
    assert_type(env.state(), CounterState)
    with env as same:
        assert_type(same, SyncEnvClient[CounterAction, CounterObservation, CounterState])


async def async_types(client: CounterClient) -> None:
    assert_type(await client.reset(), StepResult[CounterObservation])
    assert_type(await client.state(), CounterState)
    async with client as entered:
        assert_type(entered, CounterClient)
        assert_type(await entered.step(CounterAction(delta=1)), StepResult[CounterObservation])


def plain_sync_types(client: CounterClient) -> None:
    """Sync code without `.sync()` (OpenEnv's way): results are read through `Any`."""
    with client as env:
        assert_type(env, CounterClient)
        assert_type(env.reset().observation, Any)
        assert_type(env.step(CounterAction(delta=1)).reward, Any)
    env.close()
