"""Sandbox start cost: a sandboxed `true` and `python -c pass` next to a plain subprocess.

    uv run python bench/sandbox.py [--runs 40] [--json out.json]

Each round runs every target once, in turn, so load from other jobs on the machine hits them
alike; the figures are wall time from the call to its result (p50, p95, mean) and the ratio of
each p50 to a plain `subprocess.run` of the same command. Targets:

- subprocess: `subprocess.run(argv, capture_output=True)`, no sandbox.
- process: `Sandbox(backend="process").run(argv)`: new session, rlimits, a cgroup per command
  when one is writable (created, joined, killed and removed each time).
- process (rlimits only): the same without the cgroup, as inside an unprivileged container.
- bubblewrap: `Sandbox(backend="bubblewrap").run(argv)`: namespaces, mounts, (as root) setpriv
  to nobody, the shell that reports the start, plus the cgroup.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from openenv.sandbox import ExecStatus, Sandbox, SandboxUnavailableError, choose_backend
from openenv.sandbox import sandbox as sandbox_module

COMMANDS = {"true": ["true"], "python -c pass": [sys.executable, "-c", "pass"]}


def targets() -> dict[str, Callable[[list[str]], Any]]:
    found: dict[str, Callable[[list[str]], Any]] = {
        "subprocess": lambda argv: subprocess.run(argv, capture_output=True, check=True)
    }
    process = Sandbox(backend="process")
    found["process"] = lambda argv: checked(process.run(argv))
    rlimits_only = Sandbox(backend="process")

    def run_without_cgroup(argv: list[str]) -> Any:
        real = sandbox_module.cgroups.create
        sandbox_module.cgroups.create = lambda *a, **k: None  # type: ignore[assignment]
        try:
            return checked(rlimits_only.run(argv))
        finally:
            sandbox_module.cgroups.create = real  # type: ignore[assignment]

    found["process (rlimits only)"] = run_without_cgroup
    try:
        choose_backend("bubblewrap")
    except SandboxUnavailableError as exc:
        Console(stderr=True).print(f"[yellow]bubblewrap skipped: {exc}")
    else:
        bubblewrap = Sandbox(backend="bubblewrap")
        found["bubblewrap"] = lambda argv: checked(bubblewrap.run(argv))
    return found


def checked(result: Any) -> Any:
    if result.status is not ExecStatus.OK:
        raise RuntimeError(f"the benchmark command failed: {result}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40, help="rounds per command")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    console = Console()
    runners = targets()
    timings: dict[str, dict[str, list[float]]] = {c: {t: [] for t in runners} for c in COMMANDS}
    with console.status("measuring"):
        for command, argv in COMMANDS.items():
            for runner in runners.values():  # warm: first imports, caches, the bwrap probe
                runner(argv)
            for _ in range(args.runs):
                for name, runner in runners.items():
                    started = time.perf_counter()
                    runner(argv)
                    timings[command][name].append(time.perf_counter() - started)
    table = Table(title=f"Start cost of one command, {args.runs} runs each ({os.cpu_count()} CPUs)")
    for column in ("command", "target", "p50 ms", "p95 ms", "mean ms", "p50 vs subprocess"):
        table.add_column(column, justify="left" if column in ("command", "target") else "right")
    report: dict[str, Any] = {"cpus": os.cpu_count(), "runs": args.runs, "results": {}}
    for command, by_target in timings.items():
        base = statistics.median(by_target["subprocess"])
        for name, samples in by_target.items():
            p50 = statistics.median(samples)
            p95 = statistics.quantiles(samples, n=20)[-1] if len(samples) > 1 else p50
            mean = statistics.fmean(samples)
            table.add_row(
                command,
                name,
                f"{p50 * 1e3:.1f}",
                f"{p95 * 1e3:.1f}",
                f"{mean * 1e3:.1f}",
                f"{p50 / base:.1f}x",
            )
            report["results"].setdefault(command, {})[name] = {
                "p50_ms": p50 * 1e3,
                "p95_ms": p95 * 1e3,
                "mean_ms": mean * 1e3,
            }
        table.add_section()
    console.print(table)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(report, handle, indent=2)


if __name__ == "__main__":
    main()
