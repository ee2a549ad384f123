"""Steps/s of reference environments over the wire, beside the echo environment.

Each environment is served in its own process (one uvicorn worker, our runner's options) and
driven over `/ws` by one raw-frame client that picks a legal action from each observation, so
the figures show how much an environment's own step costs relative to the transport:

    .venv/bin/python bench/envs_bench.py                 # echo, chess, blackjack, atari
    .venv/bin/python bench/envs_bench.py --duration 10 --only chess,atari
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table
from websockets.asyncio.client import connect

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.server import free_port  # noqa: E402

Picker = Callable[[dict[str, Any], random.Random], dict[str, Any]]


def _echo(obs: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    return {"type": "call_tool", "tool_name": "echo_message", "arguments": {"message": "hi"}}


def _chess(obs: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    return {"move": rng.choice(obs["legal_moves"])}


def _legal_id(obs: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    return {"action_id": rng.choice(obs["legal_actions"])}


#: name -> (app import string, reset options, action picker)
TARGETS: dict[str, tuple[str, dict[str, Any], Picker]] = {
    "echo": ("echo_env.server.app:app", {}, _echo),
    "chess": ("chess_env.server.app:app", {"opponent": "random"}, _chess),
    "blackjack": ("openspiel_env.server.app:app", {"game": "blackjack"}, _legal_id),
    # base64 frames, as the atari_env client asks for (plain clients get 100,800-int lists)
    "atari": ("atari_env.server.app:app", {"game": "pong", "frame_format": "base64"}, _legal_id),
}


def start(app: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    code = (
        "from openenv.core.env_server.runner import run_server; "
        f"run_server({app!r}, host='127.0.0.1', port={port}, log_level='warning')"
    )
    process = subprocess.Popen([sys.executable, "-c", code], cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{app} exited with code {process.returncode}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return process, url
        except httpx.HTTPError:
            time.sleep(0.2)
    process.kill()
    raise TimeoutError(f"{app} did not become healthy")


async def drive(url: str, reset: dict[str, Any], pick: Picker, duration: float) -> dict[str, Any]:
    rng = random.Random(0)
    latencies: list[float] = []
    episodes = 0
    async with connect(url.replace("http://", "ws://") + "/ws", compression=None) as ws:

        async def call(message: dict[str, Any]) -> dict[str, Any]:
            await ws.send(json.dumps(message))
            reply = json.loads(await ws.recv())
            if reply["type"] == "error":
                raise RuntimeError(reply["data"])
            return reply["data"]

        data = await call({"type": "reset", "data": {**reset, "seed": 0}})
        end = time.perf_counter() + duration
        while time.perf_counter() < end:
            if data["done"]:
                episodes += 1
                data = await call({"type": "reset", "data": {**reset, "seed": episodes}})
                continue
            action = pick(data["observation"], rng)
            started = time.perf_counter()
            data = await call({"type": "step", "data": action})
            latencies.append(time.perf_counter() - started)
    total = sum(latencies)
    return {
        "steps": len(latencies),
        "steps_per_s": len(latencies) / total if total else 0.0,
        "p50_us": statistics.median(latencies) * 1e6 if latencies else 0.0,
        "episodes": episodes,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per environment")
    parser.add_argument("--only", default=",".join(TARGETS), help="comma-separated targets")
    args = parser.parse_args()
    console = Console()
    table = Table(
        title="Sequential steps over one WebSocket session (step latency excludes resets)"
    )
    for column in ("environment", "steps/s", "p50 µs", "steps", "episodes", "vs echo"):
        table.add_column(column, justify="right" if column != "environment" else "left")
    results: dict[str, dict[str, Any]] = {}
    for name in [n.strip() for n in args.only.split(",") if n.strip()]:
        app, reset, pick = TARGETS[name]
        with console.status(f"serving and driving {name} for {args.duration:g}s"):
            process, url = start(app)
            try:
                results[name] = asyncio.run(drive(url, reset, pick, args.duration))
            finally:
                process.terminate()
                process.wait(15)
    echo = results.get("echo", {}).get("steps_per_s")
    for name, r in results.items():
        ratio = f"{r['steps_per_s'] / echo:.2f}x" if echo else "n/a"
        table.add_row(
            name,
            f"{r['steps_per_s']:,.0f}",
            f"{r['p50_us']:,.0f}",
            f"{r['steps']:,}",
            str(r["episodes"]),
            ratio,
        )
    console.print(table)
    console.print(json.dumps({"cpus": os.cpu_count(), "duration_s": args.duration, **results}))


if __name__ == "__main__":
    main()
