#!/usr/bin/env python
"""Where our server spends its time per step, and its memory per idle session.

    python bench/hotspots.py cpu --app echo --sessions 8 --duration 8   # py-spy while stepping
    python bench/hotspots.py cpu --app plain
    python bench/hotspots.py memory --app echo --sessions 2000          # tracemalloc diff

`cpu` starts our server (pinned like bench.py), drives steps with bench.py's load generator and
samples the server with `py-spy record --pid` (install: `uv pip install --python .venv/bin/python
py-spy`). It prints on-CPU time by package, the lines where time is spent (self time) and the
functions that contain it (inclusive time), as a share of the samples and in µs per step.

`memory` starts the server with tracemalloc on, snapshots it before and while `--sessions` idle
WebSocket sessions are open, and prints the allocation sites that grew, per session.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tracemalloc
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench as B

APPS = {
    "echo": ("ours-echo", "mcp"),
    "plain": ("ours-plain", "plain"),
    "plain-onloop": ("ours-plain-onloop", "plain"),
    "echo-direct": ("ours-echo-direct", "mcp"),
    "echo-shared": ("ours-echo-shared", "mcp"),
    "floor": ("floor", "plain"),
    "openenv-echo": ("openenv-echo", "mcp"),
    "openenv-plain": ("openenv-plain", "plain"),
}


def _pool_waits() -> tuple[str, ...]:
    """Leaf frames of `CallDispatcher` workers waiting for a call. A timed `SimpleQueue.get`
    (idle threads retire) is a C call py-spy does not see as idle, so the wait's own line is
    the leaf."""
    from openenv.core.env_server import dispatch

    path = dispatch.__file__
    with open(path) as source:
        lines = [n for n, text in enumerate(source, 1) if "calls.get(" in text]
    return tuple(f"dispatch.py:{n})" for n in lines)


#: Leaf frames of threads that wait (py-spy may still report them as active); not CPU time.
IDLE_LEAVES = (
    "concurrent/futures/thread.py:81)",
    "threading.py:320)",
    "threading.py:324)",
    "threading.py:327)",
    "queue.py:171)",
    "queue.py:180)",
    *_pool_waits(),
)
FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")
PACKAGES = (
    "openenv",
    "fastmcp",
    "mcp",
    "pydantic",
    "pydantic_core",
    "starlette",
    "fastapi",
    "uvicorn",
    "websockets",
    "opentelemetry",
    "anyio",
    "asyncio",
    "concurrent",
    "threading",
    "orjson",
    "uuid",
    "contextlib",
    "inspect",
    "logging",
)


def package_of(path: str) -> str:
    parts = path.replace("\\", "/").split("/")
    if "openenv" in parts or "echo_env" in parts:
        return "openenv" if "openenv" in parts else "echo_env"
    for part in parts:
        name = part[:-3] if part.endswith(".py") else part
        if name in PACKAGES:
            return name
    return parts[0] if len(parts) > 1 else (path or "?")


def parse_frame(text: str) -> tuple[str, str, str]:
    m = FRAME.match(text.strip())
    if not m:
        return text.strip(), "", ""
    return m["func"], m["file"], m["line"] or ""


def start_server(key: str, extra: list[str] | None = None) -> B.Server:
    python = B.OPENENV_PYTHON if B.TARGETS[key].impl == "openenv" else B.OUR_PYTHON
    options, _ = B.uvicorn_settings([B.OUR_PYTHON, python], "warning")
    cpus = sorted(os.sched_getaffinity(0))
    server_cpus = [cpus[0]] if len(cpus) >= 2 else []
    log_dir = tempfile.mkdtemp(prefix="openenv-hotspots-")
    server = B.Server(B.TARGETS[key], python, options, server_cpus, 20000, log_dir, extra)
    try:
        server.wait_ready(timeout=180)
    except BaseException:
        server.stop()
        raise
    return server


def client_cpus() -> list[int]:
    cpus = sorted(os.sched_getaffinity(0))
    return cpus[1:] if len(cpus) >= 2 else []


# -- cpu ----------------------------------------------------------------------------------------


def cpu(args: argparse.Namespace) -> None:
    key, action_name = APPS[args.app]
    pyspy = args.py_spy or os.path.join(os.path.dirname(B.OUR_PYTHON), "py-spy")
    if not os.path.exists(pyspy):
        pyspy = shutil.which("py-spy") or ""
    if not pyspy:
        sys.exit(
            "py-spy not found: uv pip install --python .venv/bin/python py-spy (uv sync removes it)"
        )
    server = start_server(key)
    out = os.path.join(tempfile.mkdtemp(prefix="openenv-pyspy-"), f"{args.app}.txt")
    try:
        bench = B.Bench(
            duration=args.duration,
            client="fast",
            client_procs=1,
            client_cpus=client_cpus(),
            warmup=200,
        )
        # Unprofiled run first (also the warm-up): its CPU per step scales the sample shares.
        base = B.measure_ws(bench, server.url, B.ACTIONS[action_name], args.sessions, server.pid)
        spies: list[subprocess.Popen[bytes]] = []

        def start_spy() -> None:
            # Once every session is open and reset: the profile holds the steps only.
            spies.append(
                subprocess.Popen(
                    [
                        pyspy,
                        "record",
                        "--pid",
                        str(server.pid),
                        "--duration",
                        str(int(args.duration - 1)),
                        "--rate",
                        str(args.rate),
                        "--format",
                        "raw",
                        "-o",
                        out,
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
            time.sleep(0.5)

        result = B.measure_ws(
            bench, server.url, B.ACTIONS[action_name], args.sessions, server.pid, on_go=start_spy
        )
        for spy in spies:
            spy.wait(timeout=60)
    finally:
        server.stop()
    report_cpu(out, base, result, args)


def report_cpu(
    path: str, base: dict[str, Any], result: dict[str, Any], args: argparse.Namespace
) -> None:
    stacks: list[tuple[list[str], int]] = []
    idle = 0
    with open(path) as fh:
        for raw in fh:
            raw = raw.rstrip("\n")
            if not raw:
                continue
            stack, _, count = raw.rpartition(" ")
            frames = stack.split(";")
            if frames[-1].endswith(IDLE_LEAVES):
                idle += int(count)
                continue
            stacks.append((frames, int(count)))
    total = sum(c for _, c in stacks)
    us_per_step = base.get("server_cpu_us_per_step") or 0.0
    print(
        f"\n== {args.app}: {args.sessions} sessions; unprofiled {base['steps_per_s']:,.0f} "
        f"steps/s at {us_per_step:.1f} µs server CPU/step; profiled "
        f"{result['steps_per_s']:,.0f} steps/s, {total} samples "
        f"({idle} idle-thread samples dropped)"
        " =="
    )
    print("(share = fraction of on-CPU samples of the server process; µs = share * CPU/step)")

    self_lines: collections.Counter[str] = collections.Counter()
    self_pkg: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    sites: collections.Counter[str] = collections.Counter()
    focus_markers = [f for f in args.focus.split(",") if f]
    for frames, count in stacks:
        func, file, line = parse_frame(frames[-1])
        self_lines[f"{func} ({file}:{line})"] += count
        self_pkg[package_of(file)] += count
        seen = set()
        seen_sites = set()
        for frame in frames:
            f_func, f_file, f_line = parse_frame(frame)
            ident = f"{f_func} ({f_file})"
            if ident not in seen:
                seen.add(ident)
                inclusive[ident] += count
            site = f"{f_file}:{f_line} in {f_func}"
            if any(m in f_file for m in focus_markers) and site not in seen_sites:
                seen_sites.add(site)
                sites[site] += count

    def show(title: str, counter: collections.Counter[str], n: int, skip_above: float = 1.01):
        print(f"\n-- {title}")
        shown = 0
        for name, count in counter.most_common():
            share = count / total
            if share > skip_above:
                continue
            print(f"{share * 100:6.1f}%  {share * us_per_step:7.1f} µs  {name}")
            shown += 1
            if shown >= n:
                break

    show("self time by package (leaf frame)", self_pkg, 20)
    show("self time by line (leaf frame)", self_lines, args.top)
    show("inclusive time by function (roots above 97% hidden)", inclusive, args.top + 15, 0.97)
    if focus_markers:
        show(f"inclusive time under each line of {args.focus} (call sites)", sites, args.top + 15)


# -- memory -------------------------------------------------------------------------------------


def memory(args: argparse.Namespace) -> None:
    key, action_name = APPS[args.app]
    prefix = os.path.join(tempfile.mkdtemp(prefix="openenv-tracemalloc-"), "snap-")
    server = start_server(key, ["--tracemalloc", str(args.frames), "--snapshot-prefix", prefix])
    count = [0]

    def snapshot() -> tracemalloc.Snapshot:
        count[0] += 1
        done = f"{prefix}{count[0]}.done"
        os.kill(server.pid, signal.SIGUSR1)
        deadline = time.monotonic() + 120
        while not os.path.exists(done):
            if time.monotonic() > deadline:
                raise TimeoutError("no snapshot from the server")
            time.sleep(0.2)
        return tracemalloc.Snapshot.load(f"{prefix}{count[0]}.snap")

    try:
        bench = B.Bench(
            duration=1,
            client="fast",
            client_procs=2,
            client_cpus=client_cpus(),
            idle_sessions=args.sessions,
        )
        B.measure_ws(bench, server.url, B.ACTIONS[action_name], 4, None)  # load lazy code
        time.sleep(1)
        before = snapshot()
        rss0 = B.proc_rss_kb(server.pid)
        held: dict[str, Any] = {}

        def on_held() -> None:
            held["rss"] = B.proc_rss_kb(server.pid)
            held["snapshot"] = snapshot()

        result = B.measure_idle(
            bench, server.url, B.ACTIONS[action_name], server.pid, on_held=on_held
        )
    finally:
        server.stop()
    n = result["held"]
    after = held["snapshot"]
    traced = sum(s.size for s in after.statistics("filename")) - sum(
        s.size for s in before.statistics("filename")
    )
    print(f"\n== {args.app}: {n} idle sessions ==")
    print(
        f"RSS delta {(held['rss'] - rss0) / n:.1f} KB/session (with tracemalloc's own overhead); "
        f"bench.py without tracemalloc: see its idle table"
    )
    print(
        f"Python-traced delta {traced / n / 1024:.1f} KB/session; the rest is native "
        "(uvloop/libuv transports, malloc arenas, thread stacks)"
    )
    diff = after.compare_to(before, "traceback")
    owners: collections.Counter[str] = collections.Counter()
    sites: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for stat in diff:
        owner = owner_of([f.filename for f in stat.traceback])
        owners[owner] += stat.size_diff
        inner = stat.traceback[-1]
        sites[owner][f"{short(inner.filename)}:{inner.lineno}"] += stat.size_diff
    print("\n-- growth by owner, with its largest allocation sites (innermost frame)")
    for name, size in owners.most_common():
        if size / n < 100:
            continue
        print(f"{size / n / 1024:9.1f} KB/session  {name}")
        for site, site_size in sites[name].most_common(args.sites):
            print(f"{'':14}{site_size / n:8.0f} B  {site}")
    diff = after.compare_to(before, "lineno")
    print("\n-- top allocation sites by growth (bytes per session, allocations per session)")
    for stat in diff[: args.top]:
        frame = stat.traceback[0]
        print(
            f"{stat.size_diff / n:9.0f} B  {stat.count_diff / n:6.1f}  "
            f"{short(frame.filename)}:{frame.lineno}"
        )
    diff = after.compare_to(before, "traceback")
    print("\n-- top allocation tracebacks (innermost last, trimmed to ours/library frames)")
    for stat in diff[: args.top_tracebacks]:
        print(f"\n{stat.size_diff / n:9.0f} B/session, {stat.count_diff / n:.1f} blocks/session")
        frames = [f for f in stat.traceback if "importlib" not in f.filename]
        for frame in frames[-args.show_frames :]:
            print(f"    {short(frame.filename)}:{frame.lineno}")


OWNERS = (
    ("echo_environment.py", "environment instance (factory: FastMCP server + tools)"),
    ("plain_env", "environment instance (factory)"),
    ("mcp_environment.py", "environment instance (MCPEnvironment)"),
    ("openenv/core/env_server/sessions.py", "openenv session manager"),
    ("openenv/core/env_server/replay_store.py", "openenv session manager"),
    ("openenv/core/env_server/call_watchdog.py", "openenv session manager"),
    ("openenv/core/env_server/reaper.py", "openenv session manager"),
    ("openenv/core/env_server/ws.py", "openenv /ws handler"),
    ("openenv/", "openenv (other)"),
    ("fastmcp/", "fastmcp (outside the factory)"),
    ("mcp/", "mcp (outside the factory)"),
    ("starlette/", "starlette/fastapi per-connection frames"),
    ("fastapi/", "starlette/fastapi per-connection frames"),
    ("websockets/", "websockets protocol state (uvicorn sansio)"),
    ("uvicorn/", "uvicorn connection/protocol objects"),
)


def owner_of(filenames: list[str]) -> str:
    """Attribute an allocation to the most specific component on its stack."""
    joined = [f.replace("\\", "/") for f in filenames]
    for marker, name in OWNERS[:3]:  # anything built by the environment factory
        if any(marker in f for f in joined):
            return name
    for f in reversed(joined):  # otherwise the innermost frame of a known component
        for marker, name in OWNERS[3:]:
            if marker in f:
                return name
    return "other: " + short(joined[-1] if joined else "?")


def short(path: str) -> str:
    for marker in ("site-packages/", "/src/", "/lib/python3"):
        if marker in path:
            tail = path.split(marker, 1)[1]
            return tail.split("/", 1)[1] if marker == "/lib/python3" else tail
    return path


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="mode", required=True)
    c = sub.add_parser("cpu", help="py-spy profile while stepping")
    c.add_argument("--app", choices=sorted(APPS), default="echo")
    c.add_argument("--sessions", type=int, default=8)
    c.add_argument("--duration", type=float, default=8.0)
    c.add_argument("--rate", type=int, default=250)
    c.add_argument("--top", type=int, default=25)
    c.add_argument("--py-spy", default="")
    c.add_argument("--native", action="store_true", help="include C frames (uvloop, libc)")
    c.add_argument(
        "--focus",
        default="openenv/,echo_env/,plain_env",
        help="also list inclusive time of functions whose file contains these",
    )
    m = sub.add_parser("memory", help="tracemalloc diff with idle sessions open")
    m.add_argument("--app", choices=sorted(APPS), default="echo")
    m.add_argument("--sessions", type=int, default=2000)
    m.add_argument("--frames", type=int, default=40)
    m.add_argument("--top", type=int, default=25)
    m.add_argument("--sites", type=int, default=6, help="allocation sites listed per owner")
    m.add_argument("--top-tracebacks", type=int, default=8)
    m.add_argument("--show-frames", type=int, default=8)
    args = parser.parse_args()
    B.raise_nofile()
    cpu(args) if args.mode == "cpu" else memory(args)


if __name__ == "__main__":
    main()
