"""One client for sync and async code, as OpenEnv 0.10's `EnvClient` is.

Sync code calls `reset()` / `step()` / `state()` / `close()` and uses plain `with`, no `.sync()`;
async code awaits the same methods. A client serves the kind of code that used it first and
refuses the other kind with `RuntimeError`. Every test drives a real server over real sockets.
"""

from __future__ import annotations

import asyncio
import inspect
import threading

import httpx
import pytest

from echo_env import CallToolAction, EchoEnv
from openenv.core import GenericEnvClient, MCPToolClient, StepResult
from openenv.core.env_client import EnvClient
from tests.client_apps.counter import CounterAction, CounterObservation, CounterState

READY = "Echo environment ready!"


class CounterClient(EnvClient[CounterAction, CounterObservation, CounterState]):
    pass


def _active(url: str) -> int:
    return int(httpx.get(f"{url}/capacity", timeout=5).json()["active_sessions"])


def _loop_threads() -> int:
    return sum(t.name == "openenv-sync-client-loop" for t in threading.enumerate())


def _echo(message: str) -> CallToolAction:
    return CallToolAction(tool_name="echo_message", arguments={"message": message})


# -- sync code, OpenEnv's way ------------------------------------------------------------------


def test_typed_episode_in_a_plain_with_block(counter_server):
    threads = _loop_threads()
    before = _active(counter_server.url)
    with CounterClient(base_url=counter_server.url) as env:
        result = env.reset(episode_id="plain-with")
        assert isinstance(result, StepResult)
        assert isinstance(result.observation, CounterObservation)
        for delta in (2, 3):
            result = env.step(CounterAction(delta=delta))
        assert result.observation.value == 5
        state = env.state()
        assert isinstance(state, CounterState)
        assert state.history == [2, 3] and state.episode_id == "plain-with"
        assert _active(counter_server.url) == before + 1
    assert _active(counter_server.url) == before
    assert _loop_threads() == threads  # closing stops the client's loop thread


def test_calls_without_with_then_close(echo_server):
    threads = _loop_threads()
    before = _active(echo_server.url)
    env = EchoEnv(base_url=echo_server.url)
    assert env.reset().observation.echoed_message == READY
    assert _loop_threads() == threads + 1  # sync calls run on the client's own loop thread
    assert env.step(_echo("no with")).observation.result["data"] == "no with"
    assert env.state().step_count == 1
    assert env.close() is None
    assert _active(echo_server.url) == before
    assert _loop_threads() == threads


def test_the_same_client_runs_episode_after_episode(counter_server):
    env = CounterClient(base_url=counter_server.url)
    for n in (1, 2):
        with env:
            env.reset()
            assert env.step(CounterAction(delta=n)).observation.value == n
    assert env.connect() is env  # sync connect() gives the client back
    env.close()


def test_server_errors_keep_their_types_in_sync_code(counter_server):
    from openenv.core.errors import EnvironmentExecutionError

    with CounterClient(base_url=counter_server.url) as env:
        env.reset()
        with pytest.raises(EnvironmentExecutionError, match="counter asked to fail"):
            env.step(CounterAction(fail=True))
        assert env.step(CounterAction(delta=1)).observation.value == 1  # still serving


def test_mcp_client_in_sync_code_tools_stay_async_as_in_openenv(echo_server):
    """OpenEnv 0.10 leaves `list_tools` / `call_tool` async-only: in sync code they return a
    coroutine; `.sync()` makes them blocking. Reset and step are dual-mode."""
    with MCPToolClient(base_url=echo_server.url) as env:
        assert env.reset().metadata["status"] == "ready"
        tools = env.list_tools()
        assert inspect.iscoroutine(tools)
        tools.close()
        assert env.step(_echo("via step")).observation.result["data"] == "via step"
    with MCPToolClient(base_url=echo_server.url).sync() as env:
        assert env.call_tool("echo_message", message="blocking") == "blocking"


def test_sync_code_inside_a_running_loop_like_a_notebook(counter_server):
    """A notebook cell runs inside an event loop but never awaits: the calls still block."""

    async def cell() -> tuple[object, int]:
        with CounterClient(base_url=counter_server.url) as env:
            env.reset()
            result = env.step(CounterAction(delta=4))
            return result, env.state().value

    result, value = asyncio.run(cell())
    assert isinstance(result, StepResult) and result.observation.value == 4
    assert value == 4


def test_unawaited_call_in_a_running_loop_resolves_when_read(counter_server):
    async def cell() -> int:
        env = CounterClient(base_url=counter_server.url)
        pending = env.reset()
        assert "await it" in repr(pending)  # nothing ran yet
        value = pending.observation.value  # reading it runs it: the client is now sync
        env.step(CounterAction(delta=6))
        current = env.state().value
        env.close()
        return value * 100 + current

    assert asyncio.run(cell()) == 6


# -- async code, unchanged -----------------------------------------------------------------------


async def test_async_code_awaits_the_same_methods(counter_server):
    async with CounterClient(base_url=counter_server.url) as env:
        result = await env.reset()
        result = await env.step(CounterAction(delta=7))
        assert result.observation.value == 7
        assert (await env.state()).value == 7
        call = env.state()
        assert inspect.iscoroutine(call)  # once async, calls are plain coroutines
        assert (await call).applied_steps == 1


async def test_awaiting_before_any_with_fixes_async_mode(counter_server):
    env = CounterClient(base_url=counter_server.url)
    assert await env.connect() is env
    assert (await env.reset()).observation.note == "reset"
    await env.close()


# -- mixing is refused ----------------------------------------------------------------------------


def test_async_with_after_sync_use_raises_runtime_error(counter_server):
    env = CounterClient(base_url=counter_server.url)
    env.reset()

    async def use_async() -> None:
        async with env:
            pass

    with pytest.raises(RuntimeError, match="sync code"):
        asyncio.run(use_async())
    assert env.step(CounterAction(delta=1)).observation.value == 1  # sync use goes on
    env.close()


async def test_sync_wrapper_after_async_use_raises_runtime_error(counter_server):
    async with CounterClient(base_url=counter_server.url) as env:
        await env.reset()
        with pytest.raises(RuntimeError, match="async code"):
            env.sync().reset()
        assert (await env.step(CounterAction(delta=2))).observation.value == 2


async def test_awaiting_a_result_already_read_raises_runtime_error(counter_server):
    env = CounterClient(base_url=counter_server.url)
    pending = env.reset()
    assert pending.done is False  # read: the client is now used from sync code
    with pytest.raises(RuntimeError, match="sync code"):
        await pending
    # In sync mode a call made inside a running loop blocks and returns the result itself
    # (OpenEnv 0.10 does the same), so awaiting it is a TypeError.
    result = env.reset()
    assert isinstance(result, StepResult)
    env.close()


# -- async use that ended, then sync use ---------------------------------------------------------


def test_client_connected_in_asyncio_run_continues_its_session_in_sync_code(counter_server):
    """Connected inside `asyncio.run()` (whose loop then closes), then used from sync code: the
    client moves to its own loop and resumes the same server session, state and all."""
    env = CounterClient(base_url=counter_server.url)

    async def start() -> str | None:
        await env.connect()
        await env.reset(episode_id="handoff")
        await env.step(CounterAction(delta=3))
        return env.session_id

    session = asyncio.run(start())
    assert session is not None
    state = env.state()
    assert env.session_id == session
    assert (state.episode_id, state.value) == ("handoff", 3)
    assert env.step(CounterAction(delta=1)).observation.value == 4
    env.close()


def test_factory_handle_from_sync_code():
    """OpenEnv 0.10's factory handle: `asyncio.run(...)` it or `.sync()` it; closing the client
    stops the environment it started."""
    env = asyncio.run(EchoEnv.from_env("echo"))
    url = env.base_url
    assert env.reset().observation.echoed_message == READY
    assert env.step(_echo("factory")).observation.result["data"] == "factory"
    env.close()
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{url}/health", timeout=2)

    with GenericEnvClient.from_env("echo").sync() as generic:
        assert generic.reset().metadata["status"] == "ready"
