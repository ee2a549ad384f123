"""Sandbox provider: start-to-first-step latency, CPU per start, memory per idle environment.

    uv run python bench/providers_sandbox.py [--starts 20] [--idle 8]

Start-to-first-step: `provider.start("echo")` (waits for /health), a client connects, resets
and steps once; p50/p95 over `--starts` starts, the fork server already warm (its one-time
cost is printed apart). Runs the local provider on the same machine in the same run for the
ratio. CPU per start: the trainer's CPU plus the fork server's plus every process of the
environment (read from /proc before it is stopped). Memory per idle environment: the summed
PSS of its processes (shared pages divided among their sharers) and their private pages.
Target (issue 10): sandbox p50 under 300 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import time
from pathlib import Path
from typing import Any

from openenv.core.env_server import CallToolAction
from openenv.providers import StartedEnv, get_provider

TICK = os.sysconf("SC_CLK_TCK")


def cpu_of(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def env_pids(env: StartedEnv) -> list[int]:
    """The environment's processes: its cgroup's members, else its process group."""
    for group in env.info["record"].cgroup or ():
        procs = Path(group, "cgroup.procs")
        if procs.exists():
            return [int(p) for p in procs.read_text().split()]
    pgid = env.info["pid"]
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getpgid(int(entry.name)) == pgid:
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def memory_of(pids: list[int]) -> tuple[float, float]:
    """(PSS, private) in MiB summed over `pids`."""
    pss = private = 0
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            key, _, rest = line.partition(":")
            if key == "Pss":
                pss += int(rest.split()[0])
            elif key in ("Private_Clean", "Private_Dirty"):
                private += int(rest.split()[0])
    return pss / 1024, private / 1024


def zygote_pids(provider: Any) -> list[int]:
    """The fork server processes the provider uses (for their share of CPU)."""
    if provider.name == "sandbox":
        from openenv.providers import sandbox

        return [s.zygote_pid() for s in sandbox._servers.values()]
    from openenv.providers import local

    return [s.process.pid for s in local._fork_servers.values()]


async def first_step(env: StartedEnv) -> None:
    from echo_env import EchoEnv

    async with EchoEnv(**env.client_kwargs()) as client:
        await client.reset()
        await client.step(CallToolAction(tool_name="echo_message", arguments={"message": "hi"}))


async def measure(name: str, starts: int, idle: int) -> dict[str, float]:
    provider = get_provider(name)
    started = time.perf_counter()
    warm = await provider.start("echo")  # pays the fork server's start and import once
    await first_step(warm)
    await provider.stop(warm)
    cold = time.perf_counter() - started
    latencies, cpus = [], []
    for _ in range(starts):
        zygotes = zygote_pids(provider)
        cpu0 = self_cpu() + sum(cpu_of(p) for p in zygotes)
        t0 = time.perf_counter()
        env = await provider.start("echo")
        await first_step(env)
        latencies.append(time.perf_counter() - t0)
        env_cpu = sum(cpu_of(p) for p in env_pids(env))
        cpus.append(self_cpu() + sum(cpu_of(p) for p in zygotes) - cpu0 + env_cpu)
        await provider.stop(env)
    envs = [await provider.start("echo") for _ in range(idle)]
    for env in envs:
        await first_step(env)
    await asyncio.sleep(0.5)
    memory = [memory_of(env_pids(env)) for env in envs]
    processes = statistics.mean(len(env_pids(env)) for env in envs)
    for env in envs:
        await provider.stop(env)
    await provider.close()
    ordered = sorted(latencies)
    return {
        "cold_s": cold,
        "p50_ms": statistics.median(ordered) * 1000,
        "p95_ms": ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))] * 1000,
        "cpu_s": statistics.mean(cpus),
        "pss_mb": statistics.mean(m[0] for m in memory),
        "private_mb": statistics.mean(m[1] for m in memory),
        "processes": processes,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=20)
    parser.add_argument("--idle", type=int, default=8)
    parser.add_argument("--providers", default="local,sandbox")
    args = parser.parse_args()
    results = {
        name: asyncio.run(measure(name, args.starts, args.idle))
        for name in args.providers.split(",")
    }
    print(f"start-to-first-step, {args.starts} starts each (echo env, warm fork server)")
    header = (
        f"{'provider':10} {'first(s)':>9} {'p50(ms)':>8} {'p95(ms)':>8} {'cpu/start(s)':>12} "
        f"{'PSS/env(MiB)':>13} {'private/env':>12} {'procs/env':>9}"
    )
    print(header)
    for name, r in results.items():
        print(
            f"{name:10} {r['cold_s']:9.2f} {r['p50_ms']:8.1f} {r['p95_ms']:8.1f} "
            f"{r['cpu_s']:12.3f} {r['pss_mb']:13.1f} {r['private_mb']:12.1f} "
            f"{r['processes']:9.1f}"
        )
    if "local" in results and "sandbox" in results:
        ratio = results["sandbox"]["p50_ms"] / results["local"]["p50_ms"]
        print(f"sandbox p50 / local p50: {ratio:.2f}x   (target: sandbox p50 < 300 ms)")


if __name__ == "__main__":
    main()
