"""What /metrics costs: step throughput with metrics off and on, side by side in one run.

    .venv/bin/python bench/metrics_overhead.py                      # plain env, 8 sessions
    .venv/bin/python bench/metrics_overhead.py --app echo --sessions 1 --rounds 5
    .venv/bin/python bench/metrics_overhead.py --variants off,on,tracing

Each variant is its own server (same app, same uvicorn options as `bench.py`, pinned to the
first CPU; the load clients run on the others). Rounds alternate between the variants (off, on,
off, on, ...) so that a change in the machine's load hits all of them alike; the best round of
each is compared, and every round's figure is printed. `off-again` is a second server with
metrics off: how far two identical servers differ is the run's noise floor. `on` sets
OPENENV_METRICS=1; `tracing` sets OPENENV_TRACING=1 as well (OpenTelemetry's API without an SDK
configured: spans are created and dropped, the cost of the instrumentation without an exporter).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import httpx

from bench import ACTIONS, HERE, Bench, free_port, measure_ws, proc_cpu_seconds, uvicorn_settings

APPS = {"plain": ("plain_env:app", "plain"), "echo": ("echo_env.server.app:app", "mcp")}
VARIANTS: dict[str, dict[str, str]] = {
    "off": {"OPENENV_METRICS": "0"},
    "off-again": {"OPENENV_METRICS": "0"},
    "on": {"OPENENV_METRICS": "1"},
    "tracing": {"OPENENV_METRICS": "1", "OPENENV_TRACING": "1"},
}


class Served:
    """One server of the app with one variant's environment."""

    def __init__(self, app: str, variant: str, options: dict[str, Any], cpus: list[int]) -> None:
        self.variant = variant
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("OPENENV_")}
        env.update(VARIANTS[variant])
        env["MAX_CONCURRENT_ENVS"] = "1024"
        cmd = [
            sys.executable,
            os.path.join(HERE, "_serve.py"),
            app,
            "--port",
            str(self.port),
            "--uvicorn-json",
            json.dumps(options),
            *(["--cpus", ",".join(map(str, cpus))] if cpus else []),
        ]
        self.proc = subprocess.Popen(
            cmd, env=env, cwd=HERE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the {self.variant} server exited ({self.proc.returncode})")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"the {self.variant} server did not become healthy")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def steps_counted(url: str) -> float:
    """Steps the server's /metrics reports (proves the variant really had metrics on)."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("openenv_steps_total{")
    )


def in_process_cost(app_kind: str, steps: int, rounds: int) -> dict[str, float]:
    """CPU microseconds per WebSocket step inside the server (frame decoded, environment
    stepped on the dispatcher, reply encoded; no network), metrics off and on, alternating.
    The end-to-end figures include the kernel, uvicorn and the load clients' noise; this one
    is only the code that metrics change."""
    import asyncio
    import importlib

    from openenv.core.env_server.config import ServerConfig
    from openenv.core.env_server.http_server import HTTPEnvServer

    if app_kind == "plain":
        plain = importlib.import_module("plain_env")
        classes = (plain.PlainEnvironment, plain.PlainAction, plain.PlainObservation)
    else:
        from echo_env.server.echo_environment import EchoEnvironment
        from openenv.core.env_server import CallToolAction, CallToolObservation

        classes = (EchoEnvironment, CallToolAction, CallToolObservation)
    frame = json.dumps({"type": "step", "data": ACTIONS[APPS[app_kind][1]]}).encode()

    async def run() -> dict[str, float]:
        served = {}
        for name, on in (("off", False), ("on", True)):
            server = HTTPEnvServer(*classes, config=ServerConfig(metrics=on, max_concurrent_envs=2))
            served[name] = (server, await server.manager.create("ws"))
        best = {name: float("inf") for name in served}
        for _ in range(rounds):
            for name, (server, session) in served.items():
                started = time.process_time()
                for _ in range(steps):
                    await server.ws._handle(session, frame)
                best[name] = min(best[name], (time.process_time() - started) / steps * 1e6)
        for server, _ in served.values():
            await server.manager.shutdown()
        return best

    return asyncio.run(run())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--app", choices=sorted(APPS), default="plain")
    parser.add_argument("--variants", default="off,on", help="of: " + ", ".join(VARIANTS))
    parser.add_argument("--sessions", type=int, default=8, help="concurrent WebSocket sessions")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per variant")
    parser.add_argument("--json", default="", help="also write the figures here")
    parser.add_argument(
        "--in-process-steps",
        type=int,
        default=5000,
        help="steps per round of the in-process CPU comparison (0: skip it)",
    )
    args = parser.parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = set(variants) - set(VARIANTS)
    if unknown or not variants:
        parser.error(f"unknown variants {sorted(unknown)}")

    cpus = sorted(os.sched_getaffinity(0))
    server_cpus, client_cpus = ([cpus[0]], cpus[1:]) if len(cpus) >= 2 else ([], [])
    options, notes = uvicorn_settings([sys.executable], "warning")
    for note in notes:
        print(note)
    app, action_kind = APPS[args.app]
    bench = Bench(duration=args.duration, client_procs=1, client_cpus=client_cpus)
    servers = {v: Served(app, v, options, server_cpus) for v in variants}
    rounds: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    counted: dict[str, float] = {}
    try:
        for server in servers.values():
            server.wait_ready()
        for index in range(args.rounds):
            for variant in variants if index % 2 == 0 else reversed(variants):
                server = servers[variant]
                result = measure_ws(
                    bench, server.url, ACTIONS[action_kind], args.sessions, server.proc.pid
                )
                if not result.get("ok"):
                    raise RuntimeError(f"{variant}: {result.get('error')}")
                rounds[variant].append(result)
                print(
                    f"round {index + 1} {variant:>8}: {result['steps_per_s']:>9,.0f} steps/s, "
                    f"{result.get('server_cpu_us_per_step', float('nan')):6.1f} server CPU us/step"
                    f", {result['errors']} errors",
                    flush=True,
                )
        for variant, server in servers.items():
            if VARIANTS[variant].get("OPENENV_METRICS") == "1":
                counted[variant] = steps_counted(server.url)
        cpu_now = {v: proc_cpu_seconds(s.proc.pid) for v, s in servers.items()}
    finally:
        for server in servers.values():
            server.stop()

    best = {v: max(r["steps_per_s"] for r in rounds[v]) for v in variants}
    cpu = {
        v: min(r.get("server_cpu_us_per_step", float("inf")) for r in rounds[v]) for v in variants
    }
    median = {v: statistics.median(r["steps_per_s"] for r in rounds[v]) for v in variants}
    base = variants[0]
    print()
    print(
        f"app {args.app}, {args.sessions} sessions, {args.rounds} rounds of {args.duration:g} s, "
        f"server on CPU {server_cpus}, clients on CPUs {client_cpus}, "
        f"load {os.getloadavg()[0]:.1f}"
    )
    header = f"{'variant':>8} | {'best steps/s':>12} | {'median':>9} | {'CPU us/step':>11} | "
    print(header + f"{'throughput vs ' + base:>20} | {'CPU vs ' + base:>12}")
    report = []
    for variant in variants:
        ratio = best[variant] / best[base]
        cpu_ratio = cpu[variant] / cpu[base]
        print(
            f"{variant:>8} | {best[variant]:>12,.0f} | {median[variant]:>9,.0f} | "
            f"{cpu[variant]:>11.1f} | {ratio:>19.3f}x | {cpu_ratio:>11.3f}x"
        )
        report.append(
            {
                "variant": variant,
                "best_steps_per_s": best[variant],
                "median_steps_per_s": median[variant],
                "server_cpu_us_per_step": cpu[variant],
                "throughput_ratio": ratio,
                "cpu_ratio": cpu_ratio,
                "rounds_steps_per_s": [r["steps_per_s"] for r in rounds[variant]],
                "steps_counted_by_metrics": counted.get(variant),
                "server_cpu_s": cpu_now[variant],
            }
        )
    for variant, steps in counted.items():
        print(f"{variant}: /metrics counted {steps:,.0f} steps")
    in_process: dict[str, float] = {}
    if args.in_process_steps > 0:
        in_process = in_process_cost(args.app, args.in_process_steps, max(4, args.rounds * 4))
        added = in_process["on"] - in_process["off"]
        print(
            f"in process, CPU per step (best of rounds): off {in_process['off']:.2f} us, "
            f"on {in_process['on']:.2f} us: metrics add {added:.2f} us "
            f"({added / in_process['off'] * 100:.1f}% of this code, "
            f"{added / cpu[base] * 100:.1f}% of the whole server's {cpu[base]:.1f} us per step)"
        )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(
                {
                    "app": args.app,
                    "sessions": args.sessions,
                    "variants": report,
                    "in_process_cpu_us_per_step": in_process,
                },
                fh,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
