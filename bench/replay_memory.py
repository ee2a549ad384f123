"""Server memory held by replies kept for re-sent requests (issue 11), side by side.

    python replay_memory.py [--sessions 4] [--steps 40] [--size 4000000]

Serves an environment whose step replies carry `--size` bytes, opens `--sessions` resumable
WebSocket sessions and sends `--steps` steps with ids on each (every reply is kept for a
possible re-send), then reads the server's resident memory. It does so twice, in fresh server
processes: with the byte budget effectively off (`OPENENV_REPLAY_BYTES` huge: only the count
window of 32 replies bounds the cache, as before issue 11) and with the default budget.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
APP = """
from typing import Any
from openenv.core.env_server import Action, Environment, Observation, State, create_app

class BulkAction(Action):
    size: int = 0

class BulkObservation(Observation):
    payload: str = ""

class BulkEnv(Environment[BulkAction, BulkObservation, State]):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def reset(self, seed=None, episode_id=None, **kw: Any) -> BulkObservation:
        self._state = State(episode_id=episode_id)
        return BulkObservation()

    def step(self, action: BulkAction, **kw: Any) -> BulkObservation:
        return BulkObservation(payload="x" * action.size)

    @property
    def state(self) -> State:
        return self._state

app = create_app(BulkEnv, BulkAction, BulkObservation, env_name="bulk")
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def start(replay_bytes: int | None) -> tuple[subprocess.Popen, int]:
    port = free_port()
    env = {**os.environ, "MAX_CONCURRENT_ENVS": "64"}
    if replay_bytes is not None:
        env["OPENENV_REPLAY_BYTES"] = str(replay_bytes)
    code = APP + (
        "\nimport uvicorn\n"
        f"uvicorn.run(app, host='127.0.0.1', port={port}, log_level='warning', ws_max_size=1<<30)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], env=env)
    deadline = time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).read()
            return proc, port
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("server did not start") from None
            time.sleep(0.1)


async def fill(port: int, sessions: int, steps: int, size: int) -> None:
    from websockets.asyncio.client import connect

    async def one() -> None:
        url = f"ws://127.0.0.1:{port}/ws?resumable=1"
        async with connect(url, max_size=None, proxy=None, compression=None) as ws:
            await ws.recv()  # the session frame
            await ws.send('{"type":"reset","id":"r"}')
            await ws.recv()
            for i in range(steps):
                await ws.send(json.dumps({"type": "step", "id": i, "data": {"size": size}}))
                await ws.recv()
            # Keep the sessions (and their replies) alive while memory is read.
            await ws.send('{"type":"state"}')
            await ws.recv()
            await asyncio.sleep(1.0)
            await ws.send('{"type":"close"}')

    await asyncio.gather(*(one() for _ in range(sessions)))


def measure(label: str, replay_bytes: int | None, args: argparse.Namespace) -> float:
    proc, port = start(replay_bytes)
    try:
        before = rss_mb(proc.pid)
        peak = [before]

        async def run() -> None:
            task = asyncio.ensure_future(fill(port, args.sessions, args.steps, args.size))
            while not task.done():
                peak[0] = max(peak[0], rss_mb(proc.pid))
                await asyncio.sleep(0.05)
            await task

        asyncio.run(run())
        grew = peak[0] - before
        print(
            f"{label:<36} RSS {before:7.1f} MB idle -> peak {peak[0]:7.1f} MB (+{grew:6.1f} MB)",
            flush=True,
        )
        return grew
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--size", type=int, default=4_000_000)
    args = parser.parse_args()
    sys.path.insert(0, HERE)
    print(
        f"{args.sessions} resumable sessions x {args.steps} steps with ids, "
        f"replies of {args.size / 1e6:.1f} MB"
    )
    count_only = measure("count window only (32 replies)", 1 << 62, args)
    bounded = measure("default byte budget (4 MiB/session)", None, args)
    if bounded > 0:
        print(f"ratio: {count_only / bounded:.1f}x more memory without the byte budget")


if __name__ == "__main__":
    main()
