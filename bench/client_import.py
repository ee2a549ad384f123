"""How long a trainer process takes to import a typed client, cold, side by side with its floor.

Trainers import environment clients in many processes (one per rollout worker), so the import
must not drag in the server stack (FastAPI, uvicorn, fastmcp, mcp). Each target is imported in
a fresh interpreter, several times in turn (so that machine noise hits every target alike); the
figures are medians of the interpreter's own `-X importtime` total for the target and of the
process's CPU time. Floors: `pydantic` (the models every client needs) and the bare
interpreter. The goal is a typed client under 0.5 s, and the server stack nowhere in it.

    .venv/bin/python bench/client_import.py
    .venv/bin/python bench/client_import.py --runs 15
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys

TARGETS = {
    "interpreter (python -c pass)": "pass",
    "pydantic (floor)": "from pydantic import BaseModel",
    "openenv.core.protocol": "import openenv.core.protocol",
    "typed MCP client (from echo_env import EchoEnv)": "from echo_env import EchoEnv",
    "generic client (from openenv.core import GenericEnvClient)": (
        "from openenv.core import GenericEnvClient"
    ),
    "server stack (openenv.core.env_server.create_app)": (
        "from openenv.core.env_server import create_app"
    ),
}
SERVER_MODULES = ("fastapi", "starlette", "uvicorn", "fastmcp", "mcp")


def _root_import_us(line: str) -> int:
    """Cumulative microseconds of an `-X importtime` line naming a top-level import, else 0."""
    if not line.startswith("import time:"):
        return 0
    _, cumulative, name = line.split("|", 2)
    is_root = len(name) - len(name.lstrip(" ")) == 1
    return int(cumulative) if is_root and cumulative.strip().isdigit() else 0


def measure(code: str) -> tuple[float, float, list[str]]:
    """(seconds in imports, CPU seconds, server modules loaded) of one cold run of `code`."""
    probe = (
        f"{code}\nimport sys\nprint(','.join(m for m in {SERVER_MODULES!r} if m in sys.modules))"
    )
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": ""},
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    seconds = sum(_root_import_us(line) for line in proc.stderr.splitlines()) / 1e6
    loaded = [name for name in proc.stdout.strip().split(",") if name]
    return seconds, cpu, loaded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9, help="cold imports per target")
    args = parser.parse_args()
    for (
        code
    ) in TARGETS.values():  # warm the bytecode cache: cold means a new process, not a compile
        measure(code)
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in TARGETS}
    loaded: dict[str, list[str]] = {}
    for _ in range(args.runs):
        for name, code in TARGETS.items():
            seconds, cpu, mods = measure(code)
            samples[name].append((seconds, cpu))
            loaded[name] = mods
    floor = statistics.median(s for s, _ in samples["pydantic (floor)"])
    print(f"{'target':60} {'import s':>9} {'cpu s':>7} {'/pydantic':>9}  server stack loaded")
    for name, runs in samples.items():
        imp = statistics.median(s for s, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        stack = ", ".join(loaded[name]) or "none"
        print(f"{name:60} {imp:9.3f} {cpu:7.3f} {imp / floor:8.2f}x  {stack}")


if __name__ == "__main__":
    main()
