"""Start one uvicorn server for the benchmark. Runs under either venv (ours or OpenEnv's).

    python _serve.py MODULE:ATTR --port N [--uvicorn-json '{...}'] [--cpus 0] [--tracemalloc 10]

Modules are imported with this folder on sys.path. With --tracemalloc, SIGUSR1 writes a
tracemalloc snapshot to `<--snapshot-prefix><n>.snap` (after a gc) and then `<...><n>.done`.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import resource
import signal
import sys
import tracemalloc

HERE = os.path.dirname(os.path.abspath(__file__))


def raise_nofile() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def install_gc_stats() -> None:
    """Count collections and their pauses per generation; print them when the process exits."""
    import atexit
    import time

    stats = {g: [0, 0.0, 0.0] for g in range(3)}  # count, total s, max s
    started = [0.0]

    def callback(phase: str, info: dict) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            took = time.perf_counter() - started[0]
            s = stats[info["generation"]]
            s[0] += 1
            s[1] += took
            s[2] = max(s[2], took)

    def report() -> None:
        for gen, (count, total, longest) in stats.items():
            print(
                f"gc gen{gen}: {count} collections, {total * 1000:.1f} ms total, "
                f"{longest * 1000:.2f} ms max",
                file=sys.stderr,
                flush=True,
            )

    gc.callbacks.append(callback)
    atexit.register(report)


GC_STATS_PATH = "/tmp/bench-gc-{pid}.json"


def install_gc_stats_file() -> None:
    """Running garbage-collection totals per generation, written to GC_STATS_PATH now and on
    every SIGUSR2 (bench.py reads them before and after each load run); `max_s` is the longest
    pause since the previous write."""
    import time

    stats = {g: {"count": 0, "total_s": 0.0, "max_s": 0.0} for g in range(3)}
    started = [0.0]
    seq = [0]
    path = GC_STATS_PATH.format(pid=os.getpid())

    def callback(phase: str, info: dict) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
            return
        took = time.perf_counter() - started[0]
        s = stats[info["generation"]]
        s["count"] += 1
        s["total_s"] += took
        s["max_s"] = max(s["max_s"], took)

    def write(*_: object) -> None:
        seq[0] += 1
        data = {"seq": seq[0], "gens": {str(g): dict(v) for g, v in stats.items()}}
        for v in stats.values():
            v["max_s"] = 0.0
        with open(path + ".tmp", "w") as fh:
            json.dump(data, fh)
        os.replace(path + ".tmp", path)

    gc.callbacks.append(callback)
    signal.signal(signal.SIGUSR2, write)
    write()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("app", help="MODULE:ATTR of an ASGI app")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--uvicorn-json", default="{}", help="uvicorn.run keyword arguments")
    parser.add_argument("--cpus", default="", help="pin to these CPUs, e.g. '0' or '0,1'")
    parser.add_argument("--tracemalloc", type=int, default=0, help="frames to keep (0: off)")
    parser.add_argument("--snapshot-prefix", default="/tmp/bench-snap-")
    parser.add_argument(
        "--gc-stats",
        action="store_true",
        help="print garbage-collection counts and pauses per generation at exit",
    )
    parser.add_argument(
        "--gc-stats-file",
        action="store_true",
        help=f"keep collection totals, written to {GC_STATS_PATH} on SIGUSR2 (bench.py uses it)",
    )
    parser.add_argument(
        "--gc-threshold",
        default="",
        help="gc.set_threshold values, e.g. '50000,50,100' (experiment)",
    )
    parser.add_argument(
        "--gc-freeze",
        action="store_true",
        help="gc.freeze() after the app is imported (experiment)",
    )
    args = parser.parse_args()

    if args.cpus:
        os.sched_setaffinity(0, {int(c) for c in args.cpus.split(",")})
    raise_nofile()

    sys.path.insert(0, HERE)
    module_name, _, attr = args.app.partition(":")
    app = getattr(importlib.import_module(module_name), attr or "app")

    import uvicorn

    if args.gc_threshold:
        gc.set_threshold(*(int(x) for x in args.gc_threshold.split(",")))
    if args.gc_freeze:
        gc.collect()
        gc.freeze()
    if args.gc_stats:
        install_gc_stats()
    if args.gc_stats_file:
        install_gc_stats_file()
    if args.tracemalloc:
        counter = [0]

        def dump(signum: int, frame: object) -> None:
            gc.collect()
            counter[0] += 1
            path = f"{args.snapshot_prefix}{counter[0]}"
            tracemalloc.take_snapshot().dump(path + ".snap")
            with open(path + ".done", "w") as fh:
                fh.write(str(tracemalloc.get_traced_memory()[0]))

        signal.signal(signal.SIGUSR1, dump)
        tracemalloc.start(args.tracemalloc)  # after the imports: they are not sessions

    uvicorn.run(app, host=args.host, port=args.port, **json.loads(args.uvicorn_json))


if __name__ == "__main__":
    main()
