"""Many concurrent echo sessions through `EnvFleet`, and the fleet layer's cost.

One run, side by side on the same servers:

- **fleet**: `--sessions` sessions acquired at once from an `EnvFleet` of `--servers` echo
  servers (least-loaded placement), then reset and stepped `--steps` times through its
  vector client (every session's step concurrent, one batch per round);
- **direct, same servers**: the same number of plain `GenericEnvClient`s connected straight to
  the same servers (round robin), reset and stepped the same way with `asyncio.gather`: what
  a trainer does without the fleet. The ratio of the two is the fleet layer's cost;
- **direct, one server**: all the sessions on one of those servers (when it holds them all),
  the "talk to one server" baseline.

Per row: connect latency p50/p95 (each session's acquire or connect, all started at once),
aggregate steps/s over the step rounds, and the trainer's CPU per step (this process's CPU,
every thread; the servers run in their own processes). OpenEnv's scaling tutorial figure is
printed beside them for reference (from its published results, not measured here).

    .venv/bin/python bench/fleet.py                       # 1,000 sessions on 4 local servers
    .venv/bin/python bench/fleet.py --sessions 200 --servers 2 --steps 10
    .venv/bin/python bench/fleet.py --provider ray        # the same bench on a Ray cluster
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

from rich.console import Console
from rich.table import Table

from openenv.core.generic_client import GenericEnvClient
from openenv.fleet import EnvFleet
from openenv.providers import StartedEnv

#: A thousand handshakes at once on two loaded cores take longer than the default 10 s.
CLIENT_OPTIONS: dict[str, Any] = {"connect_timeout_s": 120.0, "message_timeout_s": 300.0}
ECHO_STEP = {"type": "call_tool", "tool_name": "echo_message", "arguments": {"message": "hi"}}

#: OpenEnv's scaling tutorial (SLURM, two nodes / 96 cores behind Envoy): its largest batch.
OPENENV_TUTORIAL: dict[str, Any] = {
    "sessions": 16_384,
    "connect_p50_s": 17.5,
    "setup": "SLURM multi-node, 96 cores, Envoy in front",
}


@dataclass
class Row:
    name: str
    sessions: int
    servers: int
    connect_p50_ms: float
    connect_p95_ms: float
    connect_all_s: float
    steps: int
    steps_per_s: float
    trainer_cpu_us_per_step: float
    errors: int


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


async def timed(coro: Any) -> tuple[float, Any]:
    """(seconds, result), or (seconds, the exception): a failed connect is counted, not fatal."""
    started = time.perf_counter()
    try:
        result = await coro
    except Exception as exc:
        result = exc
    return time.perf_counter() - started, result


def connected_only(attempts: list[tuple[float, Any]]) -> tuple[list[float], list[Any], int]:
    """Latencies and clients of the connects that worked, and how many failed."""
    good = [(seconds, c) for seconds, c in attempts if not isinstance(c, BaseException)]
    return [s for s, _ in good], [c for _, c in good], len(attempts) - len(good)


async def run_fleet(fleet: EnvFleet, sessions: int, steps: int) -> Row:
    connect_started = time.perf_counter()
    acquired = await asyncio.gather(*(timed(fleet.acquire()) for _ in range(sessions)))
    connect_all = time.perf_counter() - connect_started
    from openenv.fleet.vector import VectorEnv

    latencies, clients, errors = connected_only(acquired)
    vec = VectorEnv(fleet, clients, autoreset=False)
    errors += sum(not ok for ok in (await vec.reset()).ok)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(steps):
        errors += sum(not ok for ok in (await vec.step([ECHO_STEP] * len(clients))).ok)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    await vec.close()
    return report_row(
        "fleet",
        len(clients),
        len(fleet.servers()),
        latencies,
        connect_all,
        steps,
        wall,
        cpu,
        errors,
    )


async def run_direct(name: str, servers: list[StartedEnv], sessions: int, steps: int) -> Row:
    clients = [
        GenericEnvClient(**servers[i % len(servers)].client_kwargs(), **CLIENT_OPTIONS)
        for i in range(sessions)
    ]
    connect_started = time.perf_counter()
    attempts = await asyncio.gather(*(timed(c._connect_async()) for c in clients))
    connect_all = time.perf_counter() - connect_started
    latencies, clients, errors = connected_only(attempts)

    async def gather_ok(calls: list[Any]) -> int:
        results = await asyncio.gather(*calls, return_exceptions=True)
        return sum(isinstance(r, BaseException) for r in results)

    errors += await gather_ok([c._reset_async() for c in clients])
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(steps):
        errors += await gather_ok([c._step_async(ECHO_STEP) for c in clients])
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    await asyncio.gather(*(c._close_async() for c in clients), return_exceptions=True)
    return report_row(
        name, len(clients), len(servers), latencies, connect_all, steps, wall, cpu, errors
    )


def report_row(
    name: str,
    sessions: int,
    servers: int,
    latencies: list[float],
    connect_all: float,
    steps: int,
    wall: float,
    cpu: float,
    errors: int,
) -> Row:
    total = sessions * steps
    done = Row(
        name=name,
        sessions=sessions,
        servers=servers,
        connect_p50_ms=statistics.median(latencies) * 1e3,
        connect_p95_ms=percentile(latencies, 0.95) * 1e3,
        connect_all_s=connect_all,
        steps=total,
        steps_per_s=total / wall if wall else 0.0,
        trainer_cpu_us_per_step=cpu / total * 1e6 if total else 0.0,
        errors=errors,
    )
    print(json.dumps(asdict(done)), flush=True)  # kept even if a later row fails
    return done


async def main(args: argparse.Namespace) -> dict[str, Any]:
    per_server = math.ceil(args.sessions / args.servers)
    started = time.perf_counter()
    async with EnvFleet(
        "echo",
        provider=args.provider,
        servers=args.servers,
        sessions_per_server=per_server,
        max_creates_per_s=args.max_creates_per_s,
        acquire_timeout_s=300,
        client_kwargs=CLIENT_OPTIONS,
    ) as fleet:
        warm_pool_s = time.perf_counter() - started
        servers = fleet.servers()
        # Where the provider placed them (Ray: a node id per server; local: one machine).
        per_node = Counter(str(s.info.get("node_id", "this machine")) for s in servers)
        rows = []
        for _ in range(args.repeat):
            rows.append(await run_fleet(fleet, args.sessions, args.steps))
            rows.append(
                await run_direct("direct, same servers", servers, args.sessions, args.steps)
            )
        # Skipped when one server cannot hold every session (its /capacity says so).
        capacity = (await fleet._get_json(servers[0], "/capacity"))["max_sessions"]
        if capacity >= args.sessions:
            rows.append(
                await run_direct("direct, one server", servers[:1], args.sessions, args.steps)
            )
    return {
        "provider": args.provider or "local",
        "sessions": args.sessions,
        "servers": args.servers,
        "steps_per_session": args.steps,
        "warm_pool_s": warm_pool_s,
        "servers_per_node": sorted(per_node.values(), reverse=True),
        "rows": [asdict(r) for r in rows],
    }


def median_of(rows: list[dict[str, Any]], name: str, key: str) -> Optional[float]:
    """The median of one figure over the repeats of a run (the machine is shared: runs vary)."""
    values = [r[key] for r in rows if r["name"] == name]
    return statistics.median(values) if values else None


def report(result: dict[str, Any], console: Console) -> None:
    table = Table(
        title=(
            f"{result['sessions']:,} echo sessions, {result['servers']} servers "
            f"({result['provider']}), {result['steps_per_session']} steps each; "
            f"warm pool up in {result['warm_pool_s']:.1f} s; servers per node "
            f"{result['servers_per_node']}"
        )
    )
    for column in (
        "run",
        "sessions",
        "servers",
        "connect p50",
        "connect p95",
        "all connected",
        "steps/s",
        "trainer CPU/step",
        "errors",
    ):
        table.add_column(column, justify="left" if column == "run" else "right")
    for r in result["rows"]:
        table.add_row(
            r["name"],
            f"{r['sessions']:,}",
            str(r["servers"]),
            f"{r['connect_p50_ms']:.0f} ms",
            f"{r['connect_p95_ms']:.0f} ms",
            f"{r['connect_all_s']:.2f} s",
            f"{r['steps_per_s']:,.0f}",
            f"{r['trainer_cpu_us_per_step']:.0f} µs",
            str(r["errors"]),
        )
    tutorial = OPENENV_TUTORIAL
    table.add_row(
        "OpenEnv tutorial *",
        f"{tutorial['sessions']:,}",
        "-",
        f"{tutorial['connect_p50_s'] * 1e3:,.0f} ms",
        "-",
        "-",
        "-",
        "-",
        "-",
    )
    console.print(table)
    console.print(f"* OpenEnv's published scaling figure ({tutorial['setup']}), not measured here")
    for baseline in ("direct, same servers", "direct, one server"):
        ratios = []
        for key, label in (
            ("trainer_cpu_us_per_step", "trainer CPU per step"),
            ("steps_per_s", "steps/s"),
            ("connect_p50_ms", "connect p50"),
        ):
            fleet = median_of(result["rows"], "fleet", key)
            direct = median_of(result["rows"], baseline, key)
            if fleet and direct:
                ratios.append(f"{label} x{fleet / direct:.2f}")
        if ratios:
            console.print(f"fleet / {baseline} (medians over repeats): " + ", ".join(ratios))


def parse(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--servers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=20, help="steps per session")
    parser.add_argument("--repeat", type=int, default=1, help="fleet/direct pairs, alternated")
    parser.add_argument("--provider", default=None, help="provider name (default: local)")
    parser.add_argument("--max-creates-per-s", type=float, default=None)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse()
    outcome = asyncio.run(main(arguments))
    report(outcome, Console(width=150))
    if arguments.json is not None:
        arguments.json.write_text(json.dumps(outcome, indent=2))
    sys.exit(0)
