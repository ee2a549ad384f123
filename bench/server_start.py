"""Server start: from process start to the first 200 on /health, with and without bytecode.

    uv run python bench/server_start.py [--rounds 5] [MODULE ...]

Each MODULE (default: `echo_env.server.app`, the MCP echo env, and `math_env.server.app`, a plain
typed env) is started as `python -m MODULE --port N`, and `/health` is polled every 2 ms. Two
ways, interleaved round by round so that background load hits both alike:

- `bytecode`: the venv as installed (`[tool.uv] compile-bytecode = true`: uv compiles
  site-packages at install; the workspace's own editable sources got theirs on first import).
- `no bytecode`: `PYTHONPYCACHEPREFIX` points at a fresh empty folder per start, so no `.pyc`
  is found and every module is compiled at import, as in a venv uv made without the setting.
- `boot` (with bytecode): `python -m openenv.core.env_server.boot MODULE`, the images' command,
  which keeps the garbage collector off while the server imports.

Prints the median and min ms per (module, way), and the CPU the server process used to get there.
"""

from __future__ import annotations

import argparse
import http.client
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time


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


def start_once(module: str, way: str, command: list[str] | None = None) -> tuple[float, float]:
    """(ms to the first 200 on /health, CPU ms of the server until then). `command` replaces
    `python -m MODULE` (e.g. another venv's interpreter running `_serve.py APP`)."""
    port = free_port()
    env = dict(os.environ, OPENENV_LOG_LEVEL="warning")
    with tempfile.TemporaryDirectory(prefix="openenv-nopyc-") as empty:
        argv = [*(command or [sys.executable, "-m", module]), "--port", str(port)]
        if way == "no bytecode":
            env["PYTHONPYCACHEPREFIX"] = empty
        else:  # a shell with PYTHONDONTWRITEBYTECODE=1 would leave every start without bytecode
            env.pop("PYTHONDONTWRITEBYTECODE", None)
        if way == "boot":
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
            with open(f"/proc/{proc.pid}/stat") as stat:
                fields = stat.read().rpartition(")")[2].split()
            ticks = os.sysconf("SC_CLK_TCK")
            cpu = (int(fields[11]) + int(fields[12])) * 1000 / ticks
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return elapsed, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "modules", nargs="*", default=["echo_env.server.app", "math_env.server.app"]
    )
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    ways = ["bytecode", "no bytecode", "boot"]
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for module in args.modules:
        start_once(module, "bytecode")  # warm the page cache and write the sources' .pyc
    for _ in range(args.rounds):
        for module in args.modules:
            for way in ways:
                results.setdefault((module, way), []).append(start_once(module, way))
    print(f"| server | way | p50 ms to /health | min ms | CPU ms (p50) | rounds: {args.rounds} |")
    print("|---|---|---:|---:|---:|---|")
    for (module, way), runs in results.items():
        times = [t for t, _ in runs]
        cpus = [c for _, c in runs]
        print(
            f"| {module} | {way} | {statistics.median(times):.0f} | {min(times):.0f} "
            f"| {statistics.median(cpus):.0f} | |"
        )


if __name__ == "__main__":
    main()
