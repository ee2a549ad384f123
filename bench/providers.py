"""How fast providers start environments, what a start costs, and what an idle one holds.

For each provider (by name, through the one provider interface) and one environment:

- start-to-first-step latency, p50 and p95 over `--starts` sequential starts: from `start()` to
  the reply of the first step (a reset and one step over a fresh client), the environment then
  stopped;
- CPU seconds per start: the trainer's own CPU plus the environment server's and the fork
  server's, over the same starts;
- memory per idle environment: `--idle` environments started, each with an open session, then
  PSS (shared pages split fairly between the processes that share them) and USS (pages only
  that process holds) per environment;
- wall time to start N environments at once (`--fleet`, e.g. 1,32,256) until all are healthy.

`cold-process` is the baseline the fork server replaces: a new interpreter per environment
(`python -m <env>.server.app`), which is what a per-environment process or uv launch costs.
Ratios in the summary are measured side by side in this run.

    .venv/bin/python bench/providers.py
    .venv/bin/python bench/providers.py --providers local,sandbox,cold-process --fleet 1,32,256
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from openenv.core.generic_client import GenericEnvClient
from openenv.providers import EnvSpec, Provider, StartedEnv, get_provider
from openenv.providers.ownership import Owner

CLK_TCK = os.sysconf("SC_CLK_TCK")
ECHO_STEP = {"type": "call_tool", "tool_name": "echo_message", "arguments": {"message": "hi"}}


def cpu_seconds(pid: int) -> float:
    """utime + stime of a live process (0 when it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def memory_kb(pid: int) -> tuple[int, int]:
    """(PSS, USS) in KiB of one process."""
    values: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            key, _, rest = line.partition(":")
            if rest.strip().endswith("kB"):
                values[key] = int(rest.split()[0])
    uss = values.get("Private_Clean", 0) + values.get("Private_Dirty", 0)
    return values.get("Pss", 0), uss


class ColdProcess(Provider):
    """Baseline: one new interpreter per environment, as a launcher without a fork server."""

    name = "cold-process"

    def __init__(self) -> None:
        super().__init__()
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    async def _start(self, spec: EnvSpec) -> StartedEnv:
        from openenv.providers.spec import resolve_app

        module = resolve_app(spec.target).app.partition(":")[0]
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        process = await asyncio.to_thread(
            subprocess.Popen,
            [sys.executable, "-m", module, "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "OPENENV_LOG_LEVEL": "warning"},
        )
        env_id = f"cold-{process.pid}"
        self.processes[env_id] = process
        return StartedEnv(
            id=env_id,
            provider=self.name,
            spec=spec,
            base_url=f"http://127.0.0.1:{port}",
            owner=Owner.current(),
            info={"pid": process.pid},
        )

    async def _alive(self, env: StartedEnv) -> bool:
        return self.processes[env.id].poll() is None

    async def _stop(self, env: StartedEnv) -> None:
        process = self.processes.pop(env.id)
        process.kill()
        await asyncio.to_thread(process.wait)


def tree(pid: int) -> list[int]:
    """The environment's processes: every member of the session its leader leads (a sandboxed
    environment is three processes)."""
    from openenv.providers.records import session_members

    return session_members(pid) or [pid] if pid else []


def tree_cpu(pid: int) -> float:
    return sum(cpu_seconds(p) for p in tree(pid))


def tree_memory(pid: int) -> tuple[int, int]:
    sizes = [memory_kb(p) for p in tree(pid)]
    return sum(s[0] for s in sizes), sum(s[1] for s in sizes)


def make_provider(name: str) -> Provider:
    return ColdProcess() if name == "cold-process" else get_provider(name)


def fork_server_pids() -> list[int]:
    from openenv.providers import local

    return [server.process.pid for server in local._fork_servers.values()]


@dataclass
class Figures:
    provider: str
    first_start_s: float = 0.0
    latencies: list[float] = field(default_factory=list)
    cpu_per_start: float = 0.0
    pss_kb: float = 0.0
    uss_kb: float = 0.0
    fleet: dict[int, float] = field(default_factory=dict)
    note: str = ""

    def p(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def first_step(env: StartedEnv, step: dict[str, Any]) -> None:
    async with GenericEnvClient(**env.client_kwargs()) as client:
        await client.reset()
        await client.step(step)


async def measure(name: str, target: str, args: argparse.Namespace) -> Figures:
    figures = Figures(name)
    provider = make_provider(name)
    step = ECHO_STEP if target in ("echo", "echo_env") else {}
    try:
        # The first start pays for imports (once per fork server); reported on its own.
        began = time.perf_counter()
        env = await provider.start(target)
        await first_step(env, step)
        figures.first_start_s = time.perf_counter() - began
        await provider.stop(env)

        helpers_before = sum(cpu_seconds(pid) for pid in fork_server_pids())
        trainer_before = time.process_time()
        server_cpu = 0.0
        for _ in range(args.starts):
            began = time.perf_counter()
            env = await provider.start(target)
            await first_step(env, step)
            figures.latencies.append(time.perf_counter() - began)
            server_cpu += tree_cpu(env.info.get("pid", 0))
            await provider.stop(env)
        helpers = sum(cpu_seconds(pid) for pid in fork_server_pids()) - helpers_before
        trainer = time.process_time() - trainer_before
        figures.cpu_per_start = (trainer + server_cpu + helpers) / args.starts

        if args.idle:
            started = [await provider.start(target) for _ in range(args.idle)]
            clients = [GenericEnvClient(**env.client_kwargs()) for env in started]
            for client in clients:
                await client.reset()
            await asyncio.sleep(0.5)
            sizes = [tree_memory(env.info.get("pid", 0)) for env in started]
            figures.pss_kb = statistics.mean(s[0] for s in sizes)
            figures.uss_kb = statistics.mean(s[1] for s in sizes)
            for client in clients:
                await client.disconnect()
            await asyncio.gather(*(provider.stop(env) for env in started))

        for count in args.fleet:
            began = time.perf_counter()
            started = await asyncio.gather(
                *(provider.start(target, ready_timeout_s=600) for _ in range(count))
            )
            figures.fleet[count] = time.perf_counter() - began
            await asyncio.gather(*(provider.stop(env) for env in started))
    finally:
        await provider.close()
    return figures


def print_table(results: list[Figures], args: argparse.Namespace) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # pragma: no cover
        for figures in results:
            print(figures)
        return
    table = Table(title=f"providers: {args.env}, {args.starts} sequential starts")
    for column in ("provider", "first start", "p50", "p95", "CPU s/start", "PSS/env", "USS/env"):
        table.add_column(column, justify="right")
    for count in args.fleet:
        table.add_column(f"{count} at once", justify="right")
    for f in results:
        row = [
            f.provider,
            f"{f.first_start_s * 1000:.0f} ms",
            f"{f.p(0.5) * 1000:.0f} ms",
            f"{f.p(0.95) * 1000:.0f} ms",
            f"{f.cpu_per_start:.3f}",
            f"{f.pss_kb / 1024:.1f} MiB" if f.pss_kb else "-",
            f"{f.uss_kb / 1024:.1f} MiB" if f.uss_kb else "-",
        ]
        row += [f"{f.fleet[c]:.2f} s" if c in f.fleet else "-" for c in args.fleet]
        table.add_row(*row)
    Console(width=160).print(table)
    baseline = next((f for f in results if f.provider == "cold-process"), None)
    if baseline is not None:
        for f in results:
            if f is not baseline and f.latencies:
                print(
                    f"{f.provider}: p50 {baseline.p(0.5) / f.p(0.5):.1f}x faster and "
                    f"{baseline.cpu_per_start / max(f.cpu_per_start, 1e-9):.1f}x less CPU per "
                    "start than a new interpreter per environment"
                )


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--providers", default="local,cold-process")
    parser.add_argument("--env", default="echo", help="environment name, folder or app")
    parser.add_argument("--starts", type=int, default=20)
    parser.add_argument("--idle", type=int, default=16, help="idle environments for memory")
    parser.add_argument("--fleet", default="1,32", help="comma-separated sizes started at once")
    args = parser.parse_args(argv)
    args.fleet = [int(n) for n in args.fleet.split(",") if n]
    results = []
    for name in args.providers.split(","):
        fleet = args.fleet if name != "cold-process" else [n for n in args.fleet if n <= 32]
        print(f"measuring {name} ...", file=sys.stderr, flush=True)
        run_args = argparse.Namespace(**{**vars(args), "fleet": fleet})
        results.append(asyncio.run(measure(name, args.env, run_args)))
    print_table(results, args)


if __name__ == "__main__":
    main()
