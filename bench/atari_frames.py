"""Atari steps/s direct (in-process) vs served (over `/ws`), at 1 and 16 sessions, side by side.

    .venv/bin/python bench/atari_frames.py                     # 5 s per row, pong, RGB frames
    .venv/bin/python bench/atari_frames.py --duration 10 --sessions 1,16 --json /tmp/atari.json

Direct: `AtariEnvironment` objects stepped in this process (round robin over the sessions), with
raw-bytes frames (the cheapest observation the environment makes: no wire, no encoding).
Served: the Atari server in its own process, driven by this project's `AtariEnv` client (one
connection per session, all stepping concurrently), once per wire form:

- `json`: the frame as base64 text inside a JSON text frame (what this client got before
  binary frames, and what any client gets that does not negotiate them);
- `binary`: the `openenv.v1.bin` subprotocol, the frame's bytes as a binary attachment;
- `list`: OpenEnv's form (a flat int list in JSON), as an OpenEnv client asks for it.

Rows alternate (`--repeat` rounds) so load from other jobs hits them alike. CPU per step: for
direct rows this process's, for served rows the server process's user+system time over the
steps it served, and beside it the client's (this process: the `AtariEnv` clients and the loop).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from atari_env import AtariAction, AtariEnv  # noqa: E402
from atari_env.server.atari_environment import AtariEnvironment  # noqa: E402
from envs_bench import start  # noqa: E402

FORMS = {"json": "base64", "binary": "bytes", "list": "list"}


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0  # utime + stime, in clock ticks of 10 ms


def direct(sessions: int, duration: float) -> dict[str, Any]:
    envs = [AtariEnvironment(game_name="pong", frame_format="bytes") for _ in range(sessions)]
    rng = random.Random(0)
    obs = [env.reset(seed=i) for i, env in enumerate(envs)]
    steps = 0
    started, cpu0 = time.perf_counter(), time.process_time()
    end = started + duration
    while time.perf_counter() < end:
        for i, env in enumerate(envs):
            if obs[i].done:
                obs[i] = env.reset(seed=i)
                continue
            obs[i] = env.step(AtariAction(action_id=rng.choice(obs[i].legal_actions)))
            steps += 1
    took, cpu = time.perf_counter() - started, time.process_time() - cpu0
    for env in envs:
        env.close()
    return {"steps": steps, "steps_per_s": steps / took, "cpu_us": cpu / steps * 1e6}


async def served(url: str, pid: int, sessions: int, form: str, duration: float) -> dict[str, Any]:
    options = {"binary_frames": True} if form == "binary" else {}
    clients = [AtariEnv(base_url=url, **options) for _ in range(sessions)]
    for client in clients:
        await client.connect()
    try:
        results = [await c.reset(seed=i, frame_format=FORMS[form]) for i, c in enumerate(clients)]
        assert len(results[0].observation.screen) == 210 * 160 * 3
        counts = [0] * sessions
        end = time.perf_counter() + duration

        async def run(i: int) -> None:
            rng = random.Random(i)
            result = results[i]
            while time.perf_counter() < end:
                if result.done:
                    result = await clients[i].reset(seed=i, frame_format=FORMS[form])
                    continue
                action = rng.choice(result.observation.legal_actions)
                result = await clients[i].step(AtariAction(action_id=action))
                counts[i] += 1

        cpu0, t0, mine0 = _cpu_s(pid), time.perf_counter(), time.process_time()
        await asyncio.gather(*(run(i) for i in range(sessions)))
        took, cpu = time.perf_counter() - t0, _cpu_s(pid) - cpu0
        mine = time.process_time() - mine0
    finally:
        for client in clients:
            await client.close()
    steps = sum(counts)
    return {
        "steps": steps,
        "steps_per_s": steps / took,
        "server_cpu_us": cpu / steps * 1e6,
        "client_cpu_us": mine / steps * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per row")
    parser.add_argument("--sessions", default="1,16")
    parser.add_argument("--forms", default="json,binary,list")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args()
    counts = [int(s) for s in args.sessions.split(",")]
    forms = [f.strip() for f in args.forms.split(",") if f.strip()]
    process, url = start("atari_env.server.app:app")
    rows: dict[tuple[str, int], list[dict[str, Any]]] = {}
    try:
        for _ in range(args.repeat):
            for n in counts:
                rows.setdefault(("direct", n), []).append(direct(n, args.duration))
                for form in forms:
                    result = asyncio.run(served(url, process.pid, n, form, args.duration))
                    rows.setdefault((form, n), []).append(result)
    finally:
        process.terminate()
        process.wait(15)
    print("| sessions | run | steps/s | % of direct | CPU/step: env process | client |")
    print("|---|---|--:|--:|--:|--:|")
    summary = []
    for n in counts:
        base = statistics.median(r["steps_per_s"] for r in rows[("direct", n)])
        base_cpu = statistics.median(r["cpu_us"] for r in rows[("direct", n)])
        print(f"| {n} | direct | {base:,.0f} | 100% | {base_cpu:,.0f} µs | - |")
        for form in forms:
            sps = statistics.median(r["steps_per_s"] for r in rows[(form, n)])
            cpu = statistics.median(r["server_cpu_us"] for r in rows[(form, n)])
            client = statistics.median(r["client_cpu_us"] for r in rows[(form, n)])
            print(f"| {n} | served, {form} | {sps:,.0f} | {sps / base:.0%} | {cpu:,.0f} µs | "
                  f"{client:,.0f} µs |")  # fmt: skip
            summary.append({"sessions": n, "form": form, "steps_per_s": sps,
                            "direct_steps_per_s": base, "server_cpu_us": cpu,
                            "direct_cpu_us": base_cpu, "client_cpu_us": client})  # fmt: skip

    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
