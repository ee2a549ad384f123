"""Serve the echo environment locally and run an episode against it (async, then sync).

uv run python examples/quickstart.py
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time

import httpx

from echo_env import CallToolAction, EchoEnv


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(port: int) -> subprocess.Popen:
    """`python -m echo_env.server.app` is how any environment is served; we wait for /health."""
    cmd = [sys.executable, "-m", "echo_env.server.app", "--host", "127.0.0.1", "--port", str(port)]
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"The echo server exited early:\n{process.stderr.read()}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            time.sleep(0.1)
    process.kill()
    raise SystemExit("The echo server did not become healthy within 30 s")


async def async_episode(base_url: str) -> None:
    async with EchoEnv(base_url=base_url) as client:
        result = await client.reset()
        print(result.observation.echoed_message)  # Echo environment ready!
        result = await client.step(
            CallToolAction(tool_name="echo_message", arguments={"message": "Hello, World!"})
        )
        print(result.observation.result)  # Hello, World!
        tools = await client.list_tools()
        print("tools:", ", ".join(t.name for t in tools))
        print("echo_with_length:", await client.call_tool("echo_with_length", message="Hi"))
        state = await client.state()
        print(f"episode {state.episode_id} took {state.step_count} step(s)")


def sync_episode(base_url: str) -> None:
    with EchoEnv(base_url=base_url).sync() as client:
        client.reset()
        result = client.step(
            CallToolAction(tool_name="echo_message", arguments={"message": "Hello again!"})
        )
        print(result.observation.result)  # Hello again!


def main() -> None:
    port = free_port()
    server = start_server(port)
    base_url = f"http://127.0.0.1:{port}"
    print(f"echo environment serving at {base_url}")
    try:
        asyncio.run(async_episode(base_url))
        sync_episode(base_url)
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main()
