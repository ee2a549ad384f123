"""Soak and chaos run against a real server on loopback: figures per cycle, problems at the end.

Starts `tests/apps/soak_env.py` in its own process with the settings of the soak test
(`tests/soak/server.py`) and drives it with `openenv.testing.soak`: `--concurrency` sessions at
once for `--duration` seconds per cycle, each a clean episode, a resumed one (raw frames or the
real client, the connection cut with a step in flight), an abandoned one, malformed frames, a
slow reader or a hung call. After each cycle it waits for every session to end and reads the
server's RSS, file descriptors and threads from /proc. Exits 1 when the run found a problem.

    .venv/bin/python bench/soak.py                       # 3 cycles x 40 s, 200 sessions at once
    .venv/bin/python bench/soak.py --cycles 6 --duration 60 --concurrency 300
    .venv/bin/python bench/soak.py --quick               # 2 short cycles (the bench test)
    .venv/bin/python bench/soak.py --json /tmp/soak.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import asdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from openenv.testing.soak import KINDS, CycleResult, SoakReport, run_soak  # noqa: E402
from tests.soak.server import SOAK_SERVER_ENV, soak_config, soak_limits, soak_server  # noqa: E402


def _table(report: SoakReport) -> Table:
    table = Table(title="soak cycles (server figures once every session has ended)")
    for column in ("cycle", "wall s", "sessions", "steps", "resumes", "p50 ms", "p99 ms"):
        table.add_column(column, justify="right")
    for column in ("RSS MB", "heap blocks", "fds", "threads", "drain s"):
        table.add_column(column, justify="right")
    table.add_column("errors by code")
    base = report.baseline
    table.add_row(
        "start",
        *[""] * 6,
        f"{base.rss_mb:.1f}",
        str(base.heap_blocks),
        str(base.fds),
        str(base.threads),
    )
    for c in report.cycles:
        s = c.sample
        table.add_row(
            str(c.index),
            f"{c.wall_s:.0f}",
            str(sum(c.sessions.values())),
            str(c.steps),
            str(c.resumes),
            f"{c.latency(0.5):.1f}",
            f"{c.latency(0.99):.1f}",
            f"{s.rss_mb:.1f}" if s else "?",
            str(s.heap_blocks) if s else "?",
            str(s.fds) if s else "?",
            str(s.threads) if s else "?",
            f"{c.drain_s:.1f}",
            ", ".join(f"{k} {v}" for k, v in sorted(c.errors.items())),
        )
    return table


def _kinds(report: SoakReport) -> Table:
    table = Table(title="sessions by kind")
    table.add_column("kind")
    for c in report.cycles:
        table.add_column(f"cycle {c.index}", justify="right")
    for kind in KINDS:
        table.add_row(kind, *(str(c.sessions[kind]) for c in report.cycles))
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--duration", type=float, default=40.0, help="seconds per cycle")
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--quick", action="store_true", help="2 cycles x 3 s, 20 sessions, short hangs and pauses"
    )
    parser.add_argument(
        "--dynamic-mmap",
        action="store_true",
        help="leave glibc's mmap threshold dynamic (RSS then swings with heap fragmentation)",
    )
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    if args.quick:
        args.concurrency, args.duration, args.cycles = 20, 3.0, 2
    console = Console(width=max(160, Console().width))
    config = soak_config(
        concurrency=args.concurrency, duration_s=args.duration, cycles=args.cycles, seed=args.seed
    )
    if args.quick:
        config.hang_s, config.slow_pause_s = (0.5, 2.0), (0.5, 1.5)
    limits = soak_limits()
    console.print(
        f"soak: {args.cycles} cycles x {args.duration:g} s, {args.concurrency} sessions at once; "
        f"server settings {SOAK_SERVER_ENV}"
        + (" minus the mmap threshold" if args.dynamic_mmap else "")
    )
    console.print(
        f"bounds after each cycle, against cycle 1: Python heap + max({limits.heap_growth:.0%}, "
        f"{limits.heap_slack_blocks} blocks), RSS + max({limits.rss_growth:.0%}, "
        f"{limits.rss_slack_mb:g} MB), fds + {limits.fd_slack}, threads + "
        f"{limits.thread_slack} (or start + a full pool of {limits.pool_threads} + "
        f"{limits.thread_slack}); no session left open"
    )

    def progress(cycle: CycleResult) -> None:
        console.print(
            f"cycle {cycle.index}: {sum(cycle.sessions.values())} sessions, {cycle.steps} steps, "
            f"{len(cycle.problems)} problems"
        )

    drop = ("MALLOC_MMAP_THRESHOLD_",) if args.dynamic_mmap else ()
    with soak_server(drop=drop) as server:
        assert server.process is not None
        report = asyncio.run(run_soak(server.url, server.process.pid, config, limits, progress))
    console.print(_table(report))
    console.print(_kinds(report))
    console.print(f"sessions in all: {report.sessions}")
    problems = report.problems()
    if problems:
        console.print(f"[red]{len(problems)} problems[/red]")
        for problem in problems[:50]:
            console.print(f"  - {problem}", markup=False)
    else:
        console.print("[green]no problems[/green]")
    if args.json:
        data = {
            "config": asdict(config),
            "baseline": asdict(report.baseline),
            "cycles": [
                {
                    "index": c.index,
                    "wall_s": c.wall_s,
                    "sessions": dict(c.sessions),
                    "steps": c.steps,
                    "resumes": c.resumes,
                    "errors": dict(c.errors),
                    "server": asdict(c.sample) if c.sample else None,
                    "drain_s": c.drain_s,
                    "problems": c.problems,
                    "p50_ms": c.latency(0.5),
                    "p99_ms": c.latency(0.99),
                }
                for c in report.cycles
            ],
            "problems": problems,
        }
        args.json.write_text(json.dumps(data, indent=2, default=str))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
