"""The client's surface: typed failures, nothing silently dropped, real JSON-RPC ids, and
idempotent HTTP steps."""

from __future__ import annotations

import httpx
import pytest

from openenv.core import EnvClient, GenericEnvClient
from openenv.core.errors import (
    EnvironmentExecutionError,
    ServerUnreachableError,
    is_infrastructure_error,
)
from openenv.core.protocol import SESSION_HEADER
from openenv.testing.live_server import free_port
from tests.client_apps.counter import CounterAction, CounterObservation, CounterState


class CounterClient(EnvClient[CounterAction, CounterObservation, CounterState]):
    pass


async def test_dead_server_is_a_typed_connection_error() -> None:
    client = CounterClient(base_url=f"http://127.0.0.1:{free_port()}", connect_timeout_s=5)
    with pytest.raises(ServerUnreachableError) as info:
        await client.reset()
    assert isinstance(info.value, ConnectionError)  # OpenEnv code catching this still works
    assert is_infrastructure_error(info.value) and info.value.retryable
    assert "Is the environment server running" in str(info.value)


def test_dead_server_through_sync_is_the_same_error() -> None:
    with pytest.raises(ServerUnreachableError):
        with CounterClient(base_url=f"http://127.0.0.1:{free_port()}").sync() as env:
            env.reset()


async def test_step_keyword_arguments_reach_the_environment(counter_server) -> None:
    async with CounterClient(base_url=counter_server.url) as client:
        await client.reset()
        plain = await client.step(CounterAction(delta=1))
        assert "step_kwargs" not in plain.metadata
        result = await client.step(CounterAction(delta=1), timeout_s=2.5, note="x")
        assert result.metadata["step_kwargs"] == {"timeout_s": 2.5, "note": "x"}


async def test_json_rpc_ids_are_real(counter_server) -> None:
    async with GenericEnvClient(base_url=counter_server.url) as client:
        first = await client.mcp_request("ping")
        second = await client.mcp_request("ping")
    assert first["result"] == {} and second["result"] == {}
    assert first["id"] != second["id"]


async def test_http_step_with_request_id_is_applied_once(counter_server) -> None:
    async with httpx.AsyncClient(base_url=counter_server.url) as http:
        sid = (await http.post("/reset", headers={SESSION_HEADER: "new"})).json()["session_id"]
        headers = {SESSION_HEADER: sid}
        try:
            step = {"action": {"delta": 3}, "request_id": "r1"}
            first = await http.post("/step", json=step, headers=headers)
            again = await http.post("/step", json=step, headers=headers)
            assert first.status_code == again.status_code == 200
            assert first.json() == again.json()
            assert first.json()["observation"]["applied_steps"] == 1

            failing = {"action": {"delta": 1, "fail": True}, "request_id": "r2"}
            errors = [await http.post("/step", json=failing, headers=headers) for _ in range(2)]
            assert [e.status_code for e in errors] == [500, 500]
            assert errors[0].json() == errors[1].json()
            assert errors[0].json()["detail"]["code"] == EnvironmentExecutionError.default_code

            other = await http.post(
                "/step", json={"action": {"delta": 1}, "request_id": "r3"}, headers=headers
            )
            assert other.json()["observation"]["applied_steps"] == 2
            state = (await http.get("/state", headers=headers)).json()
            assert state["applied_steps"] == 2 and state["history"] == [3, 1]
        finally:
            await http.delete(f"/sessions/{sid}")
