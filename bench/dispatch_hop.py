"""What one hop of a sync call to a worker thread and back costs, in one process.

The server runs an environment's sync `reset`/`step` on a worker thread so that the event loop
never blocks. This measures that hop alone (the call itself does nothing), side by side:

- `run_in_executor`: asyncio's own way, a `ThreadPoolExecutor`;
- `CallDispatcher, one thread`: our pool path only (as for `REQUIRES_SINGLE_THREAD_EXECUTOR`);
- `CallDispatcher`: the default, where lone sequential calls take the express worker.

Sequential: one caller awaiting call after call (the lock-step latency case). Concurrent: many
callers at once (the throughput case). The process is pinned to one CPU, like the server in
`bench.py`, so that the loop and the workers share a core.

    .venv/bin/python bench/dispatch_hop.py
    .venv/bin/python bench/dispatch_hop.py --calls 50000 --callers 64 --repeat 5
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import uvloop
from rich.console import Console
from rich.table import Table

from openenv.core.env_server.dispatch import CallDispatcher

Runner = Callable[[Callable[[], Any]], Awaitable[Any]]


def _noop() -> int:
    return 1


def _executor_runner() -> tuple[Runner, Callable[[], None]]:
    pool = ThreadPoolExecutor(256)

    def run(fn: Callable[[], Any]) -> Awaitable[Any]:
        return asyncio.get_running_loop().run_in_executor(pool, fn)

    return run, pool.shutdown


def _dispatcher_runner(threads: int) -> Callable[[], tuple[Runner, Callable[[], None]]]:
    def make() -> tuple[Runner, Callable[[], None]]:
        dispatcher = CallDispatcher(threads)
        return dispatcher.run, dispatcher.shutdown

    return make


RUNNERS = {
    "run_in_executor": _executor_runner,
    "CallDispatcher, one thread": _dispatcher_runner(1),
    "CallDispatcher": _dispatcher_runner(256),
}


async def sequential(run: Runner, calls: int) -> float:
    """Microseconds per call, one caller."""
    for _ in range(100):  # threads started, the express worker in use
        await run(_noop)
    start = time.perf_counter()
    for _ in range(calls):
        await run(_noop)
    return (time.perf_counter() - start) / calls * 1e6


async def concurrent(run: Runner, calls: int, callers: int) -> float:
    """Calls per second, `callers` callers at once."""
    each = max(1, calls // callers)

    async def caller() -> None:
        for _ in range(each):
            await run(_noop)

    await asyncio.gather(*(caller() for _ in range(callers)))  # warm-up
    start = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(callers)))
    return each * callers / (time.perf_counter() - start)


async def measure(args: argparse.Namespace) -> dict[str, dict[str, list[float]]]:
    figures: dict[str, dict[str, list[float]]] = {name: {"seq": [], "conc": []} for name in RUNNERS}
    for _ in range(args.repeat):  # interleaved, so that background load hits all alike
        for name, make in RUNNERS.items():
            run, stop = make()
            figures[name]["seq"].append(await sequential(run, args.calls))
            figures[name]["conc"].append(await concurrent(run, args.calls, args.callers))
            stop()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000, help="calls per measurement")
    parser.add_argument("--callers", type=int, default=64, help="callers at once (concurrent)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each; the median is kept")
    parser.add_argument("--cpu", type=int, default=0, help="CPU to pin to; -1: no pinning")
    args = parser.parse_args()
    if args.cpu >= 0 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.cpu})
    figures = uvloop.run(measure(args))

    table = Table(title=f"A sync no-op call on a worker thread (uvloop, {args.repeat} runs)")
    table.add_column("way")
    table.add_column("sequential µs/call", justify="right")
    table.add_column(f"{args.callers} callers: calls/s", justify="right")
    table.add_column("sequential speed-up", justify="right")
    table.add_column("calls/s ratio", justify="right")
    base = figures["run_in_executor"]
    base_seq, base_conc = statistics.median(base["seq"]), statistics.median(base["conc"])
    for name, runs in figures.items():
        seq, conc = statistics.median(runs["seq"]), statistics.median(runs["conc"])
        table.add_row(
            name, f"{seq:.1f}", f"{conc:,.0f}", f"{base_seq / seq:.1f}x", f"{conc / base_conc:.1f}x"
        )
    Console(width=max(Console().width, 110)).print(table)


if __name__ == "__main__":
    main()
