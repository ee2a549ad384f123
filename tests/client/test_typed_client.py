"""A client subclass that only names its types parses observations and states by itself."""

from __future__ import annotations

import asyncio

from openenv.core.env_client import EnvClient
from openenv.core.generic_client import GenericAction, GenericEnvClient
from tests.client_apps.counter import CounterAction, CounterObservation, CounterState


class CounterClient(EnvClient[CounterAction, CounterObservation, CounterState]):
    """Names its types; overrides no hook."""


def test_subclass_overrides_no_hook():
    for hook in ("_step_payload", "_parse_result", "_parse_state"):
        assert hook not in CounterClient.__dict__
    assert CounterClient.observation_type is CounterObservation
    assert CounterClient.state_type is CounterState
    assert CounterClient.action_type is CounterAction


async def test_typed_observation_and_state(counter_server):
    async with CounterClient(base_url=counter_server.url) as client:
        reset = await client.reset(episode_id="typed-1")
        assert type(reset.observation) is CounterObservation
        assert reset.observation.note == "reset"
        assert reset.metadata == {"status": "ready"}

        result = await client.step(CounterAction(delta=5))
        obs = result.observation
        assert type(obs) is CounterObservation
        assert (obs.value, obs.applied_steps, obs.note) == (5, 1, "added 5")
        assert result.reward == 5.0 and obs.reward == 5.0
        assert result.done is False and obs.done is False
        assert result.metadata == {"applied": 1} and obs.metadata == {"applied": 1}

        result = await client.step(CounterAction(delta=2))
        assert result.observation.value == 7

        state = await client.state()
        assert type(state) is CounterState
        assert state.episode_id == "typed-1"
        assert state.step_count == 2
        # Fields of the State subclass arrive as typed fields, not as extras.
        assert state.value == 7
        assert state.applied_steps == 2
        assert state.history == [5, 2]
        assert state.label == "counter"
        assert not state.model_extra


async def test_done_flag_is_parsed(counter_server):
    async with CounterClient(base_url=counter_server.url) as client:
        await client.reset()
        result = await client.step(CounterAction(delta=1000))
        assert result.done is True
        assert result.observation.done is True


def test_typed_sync_wrapper(counter_server):
    with CounterClient(base_url=counter_server.url).sync() as client:
        client.reset()
        obs = client.step(CounterAction(delta=3)).observation
        assert isinstance(obs, CounterObservation) and obs.value == 3
        state = client.state()
        assert isinstance(state, CounterState) and state.history == [3]


async def test_generic_client_returns_dicts(counter_server):
    async with GenericEnvClient(base_url=counter_server.url) as client:
        reset = await client.reset()
        assert isinstance(reset.observation, dict)
        assert reset.observation["note"] == "reset"
        assert reset.metadata == {"status": "ready"}

        result = await client.step(GenericAction(delta=4))
        assert isinstance(result.observation, dict)
        assert result.observation["value"] == 4
        assert result.reward == 4.0

        # Plain dicts and typed models are accepted as actions too.
        result = await client.step({"delta": 1})
        assert result.observation["value"] == 5
        result = await client.step(CounterAction(delta=2))
        assert result.observation["value"] == 7

        state = await client.state()
        assert isinstance(state, dict)
        assert state["value"] == 7
        assert state["applied_steps"] == 3
        assert state["history"] == [4, 1, 2]
        assert state["label"] == "counter"


async def test_concurrent_requests_get_their_own_replies(counter_server):
    async with CounterClient(base_url=counter_server.url) as client:
        await client.reset()
        step, state, step2 = await asyncio.gather(
            client.step(CounterAction(delta=2, sleep_s=0.3)),
            client.state(),
            client.step(CounterAction(delta=5)),
        )
        assert type(step.observation) is CounterObservation
        assert step.observation.note == "added 2"
        assert type(state) is CounterState
        assert step2.observation.note == "added 5"
        assert (await client.state()).history == [2, 5]
