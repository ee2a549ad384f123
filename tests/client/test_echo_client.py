"""EchoEnv over a real server: async and sync clients, metadata, and the README examples."""

from __future__ import annotations

import subprocess
import sys

import httpx

from echo_env import CallToolAction, EchoEnv
from openenv.core.client_types import StepResult
from openenv.core.env_server.mcp_types import CallToolObservation, ListToolsAction

READY = "Echo environment ready!"
HELLO = "Hello, World!"
README_URL = "https://openenv-echo-env.hf.space"

# The two usage examples of OpenEnv's README (seed 000), verbatim except for the indentation
# the seed flattened; the sync example is cut in the seed after `print(result.obse` and is
# completed as in the upstream README (`print(result.observation.result)`).
README_ASYNC = """\
import asyncio
from echo_env import CallToolAction, EchoEnv

async def main():
    # Connect to a running Space (async context manager)
    async with EchoEnv(base_url="https://openenv-echo-env.hf.space") as client:
        # Reset the environment
        result = await client.reset()
        print(result.observation.echoed_message)  # "Echo environment ready!"

        # Send messages
        result = await client.step(
            CallToolAction(
                tool_name="echo_message",
                arguments={"message": "Hello, World!"},
            )
        )
        print(result.observation.result)  # "Hello, World!"
        print(result.reward)

asyncio.run(main())
"""

README_SYNC = """\
from echo_env import CallToolAction, EchoEnv

# Use .sync() for synchronous context manager
with EchoEnv(base_url="https://openenv-echo-env.hf.space").sync() as client:
    result = client.reset()
    result = client.step(
        CallToolAction(
            tool_name="echo_message",
            arguments={"message": "Hello, World!"},
        )
    )
    print(result.observation.result)
"""


def _hello() -> CallToolAction:
    return CallToolAction(tool_name="echo_message", arguments={"message": HELLO})


def _active(url: str) -> int:
    return httpx.get(f"{url}/capacity", timeout=5).json()["active_sessions"]


async def test_async_reset_step_state(echo_server):
    async with EchoEnv(base_url=echo_server.url) as client:
        reset = await client.reset()
        assert isinstance(reset, StepResult)
        assert reset.observation.echoed_message == READY
        assert reset.done is False

        result = await client.step(_hello())
        assert isinstance(result.observation, CallToolObservation)
        assert result.observation.error is None
        assert result.observation.result["data"] == HELLO
        assert result.observation.tool_name == "echo_message"

        state = await client.state()
        assert state.step_count == 1
        await client.step(_hello())
        assert (await client.state()).step_count == 2
        episode = (await client.state()).episode_id

        # A new episode starts the count again (and gets a new episode id).
        await client.reset()
        state = await client.state()
        assert state.step_count == 0
        assert state.episode_id != episode


async def test_reset_metadata_reaches_the_client(echo_server):
    async with EchoEnv(base_url=echo_server.url) as client:
        reset = await client.reset()
        assert reset.metadata["status"] == "ready"
        assert reset.metadata["message"] == READY
        assert reset.observation.metadata["status"] == "ready"
        assert reset.reward == 0.0


async def test_reset_kwargs_reach_the_environment(echo_server):
    async with EchoEnv(base_url=echo_server.url) as client:
        await client.reset(episode_id="episode-42")
        assert (await client.state()).episode_id == "episode-42"


async def test_list_tools_step(echo_server):
    async with EchoEnv(base_url=echo_server.url) as client:
        await client.reset()
        result = await client.step(ListToolsAction())
        names = sorted(t.name for t in result.observation.tools)
        assert names == ["echo_message", "echo_with_length"]
        schema = next(t for t in result.observation.tools if t.name == "echo_message").input_schema
        assert schema["properties"]["message"]["type"] == "string"


async def test_async_client_frees_its_session(echo_server):
    before = _active(echo_server.url)
    async with EchoEnv(base_url=echo_server.url) as client:
        await client.reset()
        assert _active(echo_server.url) == before + 1
    assert _active(echo_server.url) == before


def test_sync_client(echo_server):
    before = _active(echo_server.url)
    with EchoEnv(base_url=echo_server.url).sync() as client:
        reset = client.reset()
        assert reset.observation.echoed_message == READY
        assert reset.metadata["status"] == "ready"
        result = client.step(_hello())
        assert result.observation.result["data"] == HELLO
        assert client.state().step_count == 1
        # Coroutine methods of the async client are available as blocking calls too.
        tools = client.list_tools()
        assert {t.name for t in tools} == {"echo_message", "echo_with_length"}
        assert _active(echo_server.url) == before + 1
    assert _active(echo_server.url) == before


def test_plain_with_is_sync_code(echo_server):
    """As in OpenEnv 0.10, the client itself serves sync code: no `.sync()` needed."""
    before = _active(echo_server.url)
    with EchoEnv(base_url=echo_server.url) as client:
        assert client.reset().observation.echoed_message == READY
        assert client.step(_hello()).observation.result["data"] == HELLO
        assert client.state().step_count == 1
        assert _active(echo_server.url) == before + 1
    assert _active(echo_server.url) == before


def _run_example(code: str, url: str) -> subprocess.CompletedProcess[str]:
    assert README_URL in code
    script = code.replace(README_URL, url)
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )


def test_readme_async_example_runs_verbatim(echo_server):
    proc = _run_example(README_ASYNC, echo_server.url)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == READY
    assert lines[1] == HELLO
    assert len(lines) == 3  # and the reward line


def test_readme_sync_example_runs_verbatim(echo_server):
    proc = _run_example(README_SYNC, echo_server.url)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [HELLO]
