"""Server start: from process start to the first 200 on /health, and to the first step's reply.

    uv run python bench/server_start.py [--rounds 5] [--ways bytecode,boot]
        [--baseline DIR] [MODULE ...]

Each MODULE (default: `echo_env.server.app`, the MCP echo env, and `math_env.server.app`, a plain
typed env) is started as `python -m MODULE --port N`, and `/health` is polled every 2 ms. For the
modules in `FIRST_STEP`, a WebSocket client then resets and sends one step: "first step" is the
time from process start to that step's reply, so a cost moved from the start to the first call
shows up there. Ways, interleaved round by round so that background load hits all alike:

- `bytecode`: the venv with its `.pyc` files (the first, unmeasured start of each module writes
  the ones that are missing, whatever `PYTHONDONTWRITEBYTECODE` says).
- `no bytecode`: `PYTHONPYCACHEPREFIX` points at a fresh empty folder per start, so no `.pyc`
  is found and every module is compiled at import, as in a venv installed without compiling.
- `boot` (with bytecode): `python -m openenv.core.env_server.boot MODULE`, the images' command,
  which keeps the garbage collector off while the server imports.

`--baseline DIR` (a checkout of another commit, e.g. `git archive main | tar -x -C DIR`) runs every
way a second time with DIR's `src/` and `envs/*/` first on `PYTHONPATH`, in the same rounds, so the
two are compared under the same load. Prints the median and min ms per (module, way) and the CPU
the server process used up to /health.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

WAYS = ("bytecode", "no bytecode", "boot")
#: The action of the first step, per module measured to the first step.
FIRST_STEP: dict[str, dict[str, Any]] = {
    "echo_env.server.app": {
        "type": "call_tool",
        "tool_name": "echo_message",
        "arguments": {"message": "hi"},
    },
    "math_env.server.app": {"answer": "4"},
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def healthy(port: int) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
    try:
        conn.request("GET", "/health")
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


def first_step(port: int, action: dict[str, Any]) -> None:
    with connect(f"ws://127.0.0.1:{port}/ws", open_timeout=30) as ws:
        for message in ({"type": "reset"}, {"type": "step", "data": action}):
            ws.send(json.dumps(message))
            reply = json.loads(ws.recv(timeout=30))
            if reply.get("type") != "observation":
                raise RuntimeError(f"{message['type']} failed: {reply}")


def cpu_ms(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def baseline_path(checkout: Path) -> str:
    folders = [checkout / "src", *sorted(p for p in (checkout / "envs").glob("*") if p.is_dir())]
    return os.pathsep.join(str(p) for p in folders)


Run = tuple[float, float, float | None, float | None]


def start_once(
    module: str, way: str, pythonpath: str | None = None, command: list[str] | None = None
) -> Run:
    """(ms to the first 200 on /health, CPU ms of the server until then, ms and CPU ms to the
    first step's reply, or None when the module has no first step here). `command` replaces
    `python -m MODULE` (e.g. another venv's interpreter running `_serve.py APP`)."""
    port = free_port()
    env = dict(os.environ, OPENENV_LOG_LEVEL="warning")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, env.get("PYTHONPATH")) if p)
    with tempfile.TemporaryDirectory(prefix="openenv-nopyc-") as empty:
        argv = [*(command or [sys.executable, "-m", module]), "--port", str(port)]
        if way == "no bytecode":
            env["PYTHONPYCACHEPREFIX"] = empty
        elif way == "boot":
            argv = [sys.executable, "-m", "openenv.core.env_server.boot", *argv[2:]]
        started = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL)
        try:
            while not healthy(port):
                if proc.poll() is not None:
                    raise RuntimeError(f"{module} exited with {proc.returncode}")
                if time.perf_counter() - started > 60:
                    raise TimeoutError(f"{module} did not answer /health in 60 s")
                time.sleep(0.002)
            elapsed = (time.perf_counter() - started) * 1000
            cpu = cpu_ms(proc.pid)
            stepped = stepped_cpu = None
            if module in FIRST_STEP:
                first_step(port, FIRST_STEP[module])
                stepped = (time.perf_counter() - started) * 1000
                stepped_cpu = cpu_ms(proc.pid)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return elapsed, cpu, stepped, stepped_cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "modules", nargs="*", default=["echo_env.server.app", "math_env.server.app"]
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--ways", default=",".join(WAYS), help=f"comma-separated, of: {', '.join(WAYS)}"
    )
    parser.add_argument(
        "--baseline", type=Path, help="another checkout to run side by side (see above)"
    )
    args = parser.parse_args()
    ways = [w.strip() for w in args.ways.split(",") if w.strip()]
    unknown = set(ways) - set(WAYS)
    if unknown:
        parser.error(f"unknown ways: {sorted(unknown)}")
    trees: dict[str, str | None] = {"this": None}
    if args.baseline is not None:
        trees["baseline"] = baseline_path(args.baseline.resolve())
    results: dict[tuple[str, str, str], list[Run]] = {}
    for module in args.modules:
        for pythonpath in trees.values():
            # Warm the page cache and write the missing .pyc files.
            start_once(module, "bytecode", pythonpath)
    with open("/proc/loadavg") as load:
        print(f"load average before: {' '.join(load.read().split()[:3])}")
    for _ in range(args.rounds):
        for module in args.modules:
            for way in ways:
                for tree, pythonpath in trees.items():
                    runs = results.setdefault((module, way, tree), [])
                    runs.append(start_once(module, way, pythonpath))
    with open("/proc/loadavg") as load:
        print(f"load average after: {' '.join(load.read().split()[:3])}")
    print(
        "| server | way | tree | /health p50 ms | min ms | CPU ms (p50) "
        f"| first step p50 ms | its CPU ms (p50) | rounds: {args.rounds} |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---|")
    for (module, way, tree), runs in results.items():
        columns = [median([run[i] for run in runs]) for i in range(4)]
        shortest = f"{min(run[0] for run in runs):.0f}"
        health, cpu, step, step_cpu = columns
        print(
            f"| {module} | {way} | {tree} | {health} | {shortest} | {cpu} | {step} | {step_cpu} | |"
        )


def median(values: list[float | None]) -> str:
    known = [v for v in values if v is not None]
    return f"{statistics.median(known):.0f}" if known else "-"


if __name__ == "__main__":
    main()
