"""Atari steps/s direct (in-process) vs served (over `/ws`), at 1 and 16 sessions, side by side.

    .venv/bin/python bench/atari_frames.py                     # 5 s per row, pong, RGB frames
    .venv/bin/python bench/atari_frames.py --duration 10 --sessions 1,16 --json /tmp/atari.json
    .venv/bin/python bench/atari_frames.py --forms binary --emulators 0,auto   # in process vs pool

Direct: `AtariEnvironment` objects stepped in this process (round robin over the sessions), with
raw-bytes frames (the cheapest observation the environment makes: no wire, no encoding).
Served: the Atari server in its own process, driven by this project's `AtariEnv` client (one
connection per session, all stepping concurrently), once per wire form:

- `json`: the frame as base64 text inside a JSON text frame (what this client got before
  binary frames, and what any client gets that does not negotiate them);
- `binary`: the `openenv.v1.bin` subprotocol, the frame's bytes as a binary attachment;
- `list`: OpenEnv's form (a flat int list in JSON), as an OpenEnv client asks for it.

`--emulators` serves with each `ATARI_EMULATOR_PROCESSES` setting in turn ("default": the
server's own; 0: the emulators in the server process; N or "auto": a pool of worker processes).

Rows alternate (`--repeat` rounds) so load from other jobs hits them alike. CPU per step: for
direct rows this process's, for served rows the server process's user+system time over the
steps it served (its emulator processes included, and shown apart), and beside it the client's
(this process: the `AtariEnv` clients and the loop).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
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
from atari_env.server.emulators import PROCESSES_VAR  # noqa: E402
from envs_bench import start  # noqa: E402

FORMS = {"json": "base64", "binary": "bytes", "list": "list"}


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0  # utime + stime, in clock ticks of 10 ms


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def _cpu_tree_s(pid: int) -> tuple[float, float]:
    """CPU seconds of the server process and of its (emulator) child processes."""
    children = 0.0
    for child in _children(pid):
        try:
            children += _cpu_s(child)
        except OSError:
            pass
    return _cpu_s(pid), children


def direct(sessions: int, duration: float) -> dict[str, Any]:
    envs = [
        AtariEnvironment(game_name="pong", frame_format="bytes", emulator_processes=0)
        for _ in range(sessions)
    ]
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

        (cpu0, emu0), t0, mine0 = _cpu_tree_s(pid), time.perf_counter(), time.process_time()
        await asyncio.gather(*(run(i) for i in range(sessions)))
        took, (cpu1, emu1) = time.perf_counter() - t0, _cpu_tree_s(pid)
        mine = time.process_time() - mine0
    finally:
        for client in clients:
            await client.close()
    steps = sum(counts)
    return {
        "steps": steps,
        "steps_per_s": steps / took,
        "server_cpu_us": (cpu1 - cpu0 + emu1 - emu0) / steps * 1e6,
        "emulator_cpu_us": (emu1 - emu0) / steps * 1e6,
        "client_cpu_us": mine / steps * 1e6,
    }


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _start(setting: str) -> Any:
    """The Atari server with `ATARI_EMULATOR_PROCESSES=setting` ("default": as inherited)."""
    saved = os.environ.get(PROCESSES_VAR)
    if setting != "default":
        os.environ[PROCESSES_VAR] = setting
    try:
        return start("atari_env.server.app:app")
    finally:
        if saved is None:
            os.environ.pop(PROCESSES_VAR, None)
        else:
            os.environ[PROCESSES_VAR] = saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per row")
    parser.add_argument("--sessions", default="1,16")
    parser.add_argument("--forms", default="json,binary,list")
    parser.add_argument("--emulators", default="default", help="ATARI_EMULATOR_PROCESSES values")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args()
    counts = [int(s) for s in args.sessions.split(",")]
    forms = [f.strip() for f in args.forms.split(",") if f.strip()]
    settings = [e.strip() for e in args.emulators.split(",") if e.strip()]
    servers = {setting: _start(setting) for setting in settings}
    print(f"load average at start: {_load()}")
    rows: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    try:
        for _ in range(args.repeat):
            for n in counts:
                rows.setdefault(("direct", "", n), []).append(direct(n, args.duration))
                for setting, (process, url) in servers.items():
                    for form in forms:
                        result = asyncio.run(served(url, process.pid, n, form, args.duration))
                        rows.setdefault((form, setting, n), []).append(result)
    finally:
        for process, _ in servers.values():
            process.terminate()
            process.wait(15)
    print(f"load average at end: {_load()}")
    print("| sessions | run | steps/s | % of direct | CPU/step: env process (emulators) "
          "| client |")  # fmt: skip
    print("|---|---|--:|--:|--:|--:|")
    summary = []
    for n in counts:
        base = statistics.median(r["steps_per_s"] for r in rows[("direct", "", n)])
        base_cpu = statistics.median(r["cpu_us"] for r in rows[("direct", "", n)])
        print(f"| {n} | direct | {base:,.0f} | 100% | {base_cpu:,.0f} µs | - |")
        for setting in settings:
            label = "" if setting == "default" else f", emulators={setting}"
            for form in forms:
                runs = rows[(form, setting, n)]
                sps = statistics.median(r["steps_per_s"] for r in runs)
                cpu = statistics.median(r["server_cpu_us"] for r in runs)
                emulators = statistics.median(r["emulator_cpu_us"] for r in runs)
                client = statistics.median(r["client_cpu_us"] for r in runs)
                in_children = f" ({emulators:,.0f} µs)" if emulators else ""
                print(f"| {n} | served, {form}{label} | {sps:,.0f} | {sps / base:.0%} | "
                      f"{cpu:,.0f} µs{in_children} | {client:,.0f} µs |")  # fmt: skip
                summary.append({"sessions": n, "form": form, "emulators": setting,
                                "steps_per_s": sps, "direct_steps_per_s": base,
                                "server_cpu_us": cpu, "emulator_cpu_us": emulators,
                                "direct_cpu_us": base_cpu, "client_cpu_us": client})  # fmt: skip

    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
