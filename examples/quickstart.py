"""Start the echo environment and run an episode against it (async, then sync).

Nothing is started by hand: `from_env` / `AutoEnv.from_env` start the environment's server in a
child process (the local provider) and stop it when the client closes.

    python examples/quickstart.py
"""

from __future__ import annotations

import asyncio

from echo_env import CallToolAction, EchoEnv
from openenv.auto import AutoEnv


async def async_episode() -> None:
    async with EchoEnv.from_env("echo") as client:
        print(f"echo environment serving at {client.base_url}")
        result = await client.reset()
        print(result.observation.echoed_message)  # Echo environment ready!
        result = await client.step(
            CallToolAction(tool_name="echo_message", arguments={"message": "Hello, World!"})
        )
        print(result.observation.result["data"])  # Hello, World!
        tools = await client.list_tools()
        print("tools:", ", ".join(t.name for t in tools))
        print("echo_with_length:", await client.call_tool("echo_with_length", message="Hi"))
        state = await client.state()
        print(f"episode {state.episode_id} took {state.step_count} step(s)")


def sync_episode() -> None:
    # AutoEnv picks the typed client by name and starts the environment the same way.
    with AutoEnv.from_env("echo").sync() as client:
        client.reset()
        result = client.step(
            CallToolAction(tool_name="echo_message", arguments={"message": "Hello again!"})
        )
        print(result.observation.result["data"])  # Hello again!


def main() -> None:
    asyncio.run(async_episode())
    sync_episode()


if __name__ == "__main__":
    main()
