"""coding_env: sandbox start cost, per-snippet cost beside smolagents' LocalPythonExecutor (the
executor OpenEnv's coding_env uses, unsandboxed, in the server's own process), and steps/s and
reset latency over a real server at 1 and 32 sessions.

    uv run --group bench python bench/coding_env_bench.py [--duration 5] [--sessions 1,32]

Without the `bench` dependency group (smolagents), the side-by-side part is skipped and says so.
Target (issue 13): our sandboxed step within 2x of the unsandboxed executor on the same snippets.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from websockets.asyncio.client import connect

sys.path.insert(0, str(Path(__file__).resolve().parent))

from coding_env.server.executor import Executor
from envs_bench import start
from openenv.sandbox import Sandbox, SandboxLimits

#: The same snippets for both executors: name -> code (each leaves the namespace usable).
SNIPPETS: dict[str, str] = {
    "print": "x = 6 * 7\nprint(x)",
    "reuse a name": "print(x + 1)",
    "define and call": "def sq(n):\n    return n * n\nprint(sum(sq(i) for i in range(100)))",
    "string work": "words = 'the quick brown fox jumps over the lazy dog'.split()\n"
    "print(sorted({w: len(w) for w in words}.items())[:3])",
    "import math": "import math\nprint(math.sqrt(2) * math.pi)",
    "exception": "try:\n    1 / 0\nexcept ZeroDivisionError as e:\n    print('caught', e)",
    "loop 20k": "s = 0\nfor i in range(20000):\n    s += i\nprint(s)",
}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def time_calls(call: Callable[[], Any], repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return times


# -- sandbox start cost ----------------------------------------------------------------------


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def start_costs(repeat: int) -> dict[str, dict[str, float]]:
    """What a new sandbox, a one-shot command and a REPL (spawn to first reply) cost, in wall
    time and in CPU of the sandboxed processes (bubblewrap and the interpreter)."""
    out: dict[str, list[float]] = {"Sandbox()": [], "run python -c pass": [], "REPL to ready": []}
    cpu: dict[str, list[float]] = {"run python -c pass": [], "REPL to ready": []}
    for _ in range(repeat):
        started = time.perf_counter()
        box = Sandbox()
        out["Sandbox()"].append(time.perf_counter() - started)
        try:
            before = _children_cpu()
            out["run python -c pass"] += time_calls(
                lambda b=box: b.run([b.python, "-c", "pass"]), 1
            )
            cpu["run python -c pass"].append(_children_cpu() - before)
            started = time.perf_counter()
            executor = Executor(box, warm=False)
            executor.reset(persistent=True, timeout_s=10)
            executor.execute("pass")
            out["REPL to ready"].append(time.perf_counter() - started)
            before = _children_cpu()
            executor.close()  # reaps it: its CPU is counted from here
            cpu["REPL to ready"].append(_children_cpu() - before)
        finally:
            box.close()
    return {
        name: {
            "p50_ms": statistics.median(v) * 1e3,
            "p95_ms": percentile(v, 0.95) * 1e3,
            "cpu_ms": statistics.median(cpu[name]) * 1e3 if name in cpu else 0.0,
        }
        for name, v in out.items()
    }


# -- the same snippets, our executor beside smolagents' ---------------------------------------


def ours(persistent: bool, repeat: int) -> dict[str, float]:
    box = Sandbox(limits=SandboxLimits(wall_time_s=10))
    executor = Executor(box, warm=False)
    executor.reset(persistent=persistent, timeout_s=10)
    try:
        executor.execute(SNIPPETS["print"])  # warm; defines x for "reuse a name"
        result = {}
        for name, code in SNIPPETS.items():
            if not persistent and name == "reuse a name":
                code = "x = 42\n" + code
            cell = executor.execute(code)
            assert cell.status.value == "ok", (name, cell)
            result[name] = statistics.median(time_calls(lambda c=code: executor.execute(c), repeat))
        return result
    finally:
        executor.close()
        box.close()


def smolagents_executor(repeat: int) -> dict[str, float] | None:
    try:
        from smolagents import LocalPythonExecutor
    except ImportError:
        return None
    executor = LocalPythonExecutor(additional_authorized_imports=["math"])
    executor.send_tools({})
    executor(SNIPPETS["print"])
    result = {}
    for name, code in SNIPPETS.items():
        executor(code)
        result[name] = statistics.median(time_calls(lambda c=code: executor(c), repeat))
    return result


# -- over a real server ------------------------------------------------------------------------


async def session(
    url: str,
    reset: dict[str, Any],
    end: float,
    out: dict[str, list[float]],
    episode_steps: int,
    think_s: float,
) -> None:
    async with connect(url.replace("http://", "ws://") + "/ws", compression=None) as ws:

        async def call(message: dict[str, Any]) -> dict[str, Any]:
            started = time.perf_counter()
            await ws.send(json.dumps(message))
            reply = json.loads(await ws.recv())
            if reply["type"] == "error":
                raise RuntimeError(reply["data"])
            out[message["type"]].append(time.perf_counter() - started)
            return reply["data"]

        step = {"type": "step", "data": {"code": SNIPPETS["print"]}}
        while time.perf_counter() < end:
            await call({"type": "reset", "data": reset})
            for i in range(episode_steps):
                data = await call(step)
                assert data["observation"]["stdout"] == "42\n", data
                if i == 0:  # the first cell of an episode waits for its interpreter, if need be
                    out["first step"].append(out["step"][-1])
                if think_s:
                    await asyncio.sleep(think_s)


async def over_server(
    url: str, sessions: int, persistent: bool, args: argparse.Namespace
) -> dict[str, float]:
    out: dict[str, list[float]] = {"reset": [], "step": [], "first step": []}
    end = time.perf_counter() + args.duration
    started = time.perf_counter()
    reset = {"persistent": persistent}
    await asyncio.gather(
        *(session(url, reset, end, out, args.episode_steps, args.think) for _ in range(sessions))
    )
    elapsed = time.perf_counter() - started
    return {
        "steps_per_s": len(out["step"]) / elapsed,
        "step_p50_ms": statistics.median(out["step"]) * 1e3,
        "first_step_p50_ms": statistics.median(out["first step"]) * 1e3,
        "reset_p50_ms": statistics.median(out["reset"]) * 1e3,
        "reset_p95_ms": percentile(out["reset"], 0.95) * 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per server run")
    parser.add_argument("--sessions", default="1,32", help="comma-separated session counts")
    parser.add_argument("--repeat", type=int, default=30, help="calls per snippet")
    parser.add_argument("--episode-steps", type=int, default=4, help="steps between resets")
    parser.add_argument("--think", type=float, default=0.0, help="seconds an agent waits per step")
    args = parser.parse_args()
    console = Console()
    report: dict[str, Any] = {"cpus": os.cpu_count(), "load_before": os.getloadavg()[0]}

    report["start"] = start_costs(max(5, args.repeat // 3))
    table = Table(title=f"Sandbox start cost (backend {Sandbox().backend})")
    for column in ("what", "p50 ms", "p95 ms", "CPU ms (sandboxed processes)"):
        table.add_column(column, justify="left" if column == "what" else "right")
    for name, r in report["start"].items():
        cpu = f"{r['cpu_ms']:.0f}" if r["cpu_ms"] else "-"
        table.add_row(name, f"{r['p50_ms']:.1f}", f"{r['p95_ms']:.1f}", cpu)
    console.print(table)

    repl, fresh = ours(True, args.repeat), ours(False, max(5, args.repeat // 3))
    smol = smolagents_executor(args.repeat)
    report["snippets"] = {"repl": repl, "fresh": fresh, "smolagents": smol}
    table = Table(title="Per-snippet median ms: ours (sandboxed) beside smolagents (unsandboxed)")
    for column in ("snippet", "ours REPL", "ours fresh", "smolagents", "REPL / smolagents"):
        table.add_column(column, justify="left" if column == "snippet" else "right")
    for name in SNIPPETS:
        ratio = f"{repl[name] / smol[name]:.2f}x" if smol else "n/a"
        table.add_row(
            name,
            f"{repl[name] * 1e3:.2f}",
            f"{fresh[name] * 1e3:.1f}",
            f"{smol[name] * 1e3:.2f}" if smol else "-",
            ratio,
        )
    if smol:
        total = sum(repl.values()) / sum(smol.values())
        table.add_row(
            "all snippets",
            f"{sum(repl.values()) * 1e3:.2f}",
            f"{sum(fresh.values()) * 1e3:.1f}",
            f"{sum(smol.values()) * 1e3:.2f}",
            f"{total:.2f}x",
        )
        report["snippets"]["ratio_all"] = total
    console.print(table)
    if smol is None:
        console.print(
            "[yellow]smolagents is not installed: the side-by-side column is skipped. "
            "Run `uv run --group bench python bench/coding_env_bench.py`.[/yellow]"
        )

    os.environ.setdefault("MAX_CONCURRENT_ENVS", "64")
    process, url = start("coding_env.server.app:app")
    try:
        table = Table(title="Over a real server (/ws, one connection per session)")
        for column in (
            "mode",
            "sessions",
            "steps/s",
            "step p50 ms",
            "first step p50 ms",
            "reset p50 ms",
            "reset p95 ms",
        ):
            table.add_column(column, justify="left" if column == "mode" else "right")
        report["server"] = {}
        for persistent in (True, False):
            for sessions in [int(n) for n in args.sessions.split(",") if n.strip()]:
                mode = "REPL" if persistent else "fresh"
                r = asyncio.run(over_server(url, sessions, persistent, args))
                report["server"][f"{mode}/{sessions}"] = r
                table.add_row(
                    mode,
                    str(sessions),
                    f"{r['steps_per_s']:,.0f}",
                    f"{r['step_p50_ms']:.1f}",
                    f"{r['first_step_p50_ms']:.1f}",
                    f"{r['reset_p50_ms']:.1f}",
                    f"{r['reset_p95_ms']:.1f}",
                )
        console.print(table)
    finally:
        process.terminate()
        process.wait(15)
    report["load_after"] = os.getloadavg()[0]
    console.print(json.dumps(report))


if __name__ == "__main__":
    main()
