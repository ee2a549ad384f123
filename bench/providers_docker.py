"""Docker start-to-first-step latency and CPU per start: our Docker (and Swarm) provider side by
side with OpenEnv 0.10's `LocalDockerProvider`, on the same image.

Each side runs as its own trainer process (`bench/_docker_start_trainer.py`): ours with this
checkout's venv, OpenEnv's with the published package's venv (the compat tests' one). Both make
the same calls: `start_container(image)`, `wait_for_ready`, one reset and one echo step over a
raw WebSocket, `stop_container`. Both trainers stay up and their starts alternate one by one,
so load on the shared machine hits the sides alike; each trainer's first start (imports) is not
counted.

    .venv/bin/python bench/providers_docker.py                      # 20 starts per side
    .venv/bin/python bench/providers_docker.py --starts 20 --impls ours,openenv,ours-swarm
    .venv/bin/python bench/providers_docker.py --image openenv-echo:latest --json /tmp/d.json

The image is built from envs/echo_env with `openenv build` when it is not on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUR_PYTHON = REPO / ".venv" / "bin" / "python"
TRAINER = REPO / "bench" / "_docker_start_trainer.py"


def openenv_python() -> str:
    sys.path.insert(0, str(REPO))
    from tests.compat.compat_venv import ensure_compat_venv

    python = ensure_compat_venv()
    has_ws = subprocess.run([python, "-c", "import websockets.sync.client"], capture_output=True)
    if has_ws.returncode != 0:
        raise SystemExit(f"{python} lacks websockets (>= 12); OpenEnv 0.10 depends on it")
    return python


def ensure_image(image: str) -> None:
    present = subprocess.run(["docker", "image", "inspect", image], capture_output=True)
    if present.returncode == 0:
        return
    print(f"building {image} from envs/echo_env ...", file=sys.stderr)
    subprocess.run(
        [
            str(OUR_PYTHON.with_name("openenv")),
            "build",
            str(REPO / "envs" / "echo_env"),
            "--tag",
            image,
        ],
        check=True,
    )


class Trainer:
    """A trainer process that starts the image once per line it reads (after a warm-up)."""

    def __init__(self, python: str, impl: str, image: str) -> None:
        env = dict(os.environ, PYTHONPYCACHEPREFIX="/tmp/openenv-bench-pycache")
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        self.impl = impl
        self.proc = subprocess.Popen(
            [python, str(TRAINER), "--impl", impl, "--image", image, "--paced"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd="/tmp",
        )
        self._read()  # the warm-up start

    def _read(self) -> dict[str, float]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"the {self.impl} trainer died (exit {self.proc.wait()})")
        return json.loads(line)  # type: ignore[no-any-return]

    def start(self) -> dict[str, float]:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=120)


def fleet(python: str, impl: str, image: str, size: int) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPYCACHEPREFIX="/tmp/openenv-bench-pycache")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    out = subprocess.run(
        [python, str(TRAINER), "--impl", impl, "--image", image, "--fleet", str(size)],
        capture_output=True,
        text=True,
        env=env,
        cwd="/tmp",
        timeout=3600,
    )
    if out.returncode != 0:
        raise SystemExit(f"{impl} fleet of {size} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--image", default="openenv-echo:bench-providers")
    parser.add_argument("--starts", type=int, default=20, help="measured starts per side")
    parser.add_argument("--impls", default="ours,openenv")
    parser.add_argument("--openenv-python", default=None)
    parser.add_argument(
        "--fleet", default="", help="also start this many at once, e.g. 1,32 (comma-separated)"
    )
    parser.add_argument("--json", default=None, help="write every start's figures here")
    args = parser.parse_args()
    impls = args.impls.split(",")
    ensure_image(args.image)
    pythons = {"ours": str(OUR_PYTHON), "ours-swarm": str(OUR_PYTHON)}
    if "openenv" in impls:
        pythons["openenv"] = args.openenv_python or openenv_python()
    # Both trainers stay up; their starts alternate one by one (the first side alternates too),
    # so load from other jobs on the machine hits both sides alike.
    trainers = {impl: Trainer(pythons[impl], impl, args.image) for impl in impls if args.starts}
    records: dict[str, list[dict[str, float]]] = {impl: [] for impl in impls}
    try:
        for i in range(args.starts):
            for impl in impls if i % 2 == 0 else impls[::-1]:
                records[impl].append(trainers[impl].start())
            print(f"{i + 1}/{args.starts}", file=sys.stderr, end="\r")
    finally:
        for trainer in trainers.values():
            trainer.close()
    names = {
        "ours": "ours: DockerProvider",
        "ours-swarm": "ours: DockerSwarmProvider",
        "openenv": "OpenEnv 0.10 LocalDocker",
    }
    if args.starts > 0:
        load = os.getloadavg()[0]
        print(f"\nimage {args.image}, {args.starts} starts per side, load average {load:.1f}\n")
        header = (
            f"{'provider':<28} {'p50 s':>7} {'p95 s':>7} {'ready p50':>10} "
            f"{'trainer CPU s':>14} {'engine CPU s':>13} {'stop p50 s':>11}"
        )
        print(header)
        print("-" * len(header))
        p50: dict[str, float] = {}
        for impl in impls:
            rows = records[impl]
            first = [row["first_step_s"] for row in rows]
            p50[impl] = statistics.median(first)
            print(
                f"{names[impl]:<28} {p50[impl]:>7.2f} {percentile(first, 0.95):>7.2f} "
                f"{statistics.median(row['ready_s'] for row in rows):>10.2f} "
                f"{statistics.mean(row['trainer_cpu_s'] for row in rows):>14.3f} "
                f"{statistics.mean(row['engine_cpu_s'] for row in rows):>13.3f} "
                f"{statistics.median(row['stop_s'] for row in rows):>11.2f}"
            )
        if "ours" in p50 and "openenv" in p50:
            print(f"\nOpenEnv p50 / ours p50: {p50['openenv'] / p50['ours']:.2f}x")
    fleets = []
    for size in [int(n) for n in args.fleet.split(",") if n]:
        for impl in impls:
            fleets.append(fleet(pythons[impl], impl, args.image, size))
            print(f"fleet {size}: {impl}", file=sys.stderr)
    if fleets:
        print(
            f"\n{'provider':<28} {'at once':>8} {'all ready s':>12} {'trainer CPU s':>14} "
            f"{'engine CPU s':>13} {'idle MB/env':>12} {'stop all s':>11}"
        )
        for row in fleets:
            if "failed" in row:
                print(f"{names[str(row['impl'])]:<28} {row['fleet']:>8}  {row['failed']}")
                continue
            memory = row["idle_mb_per_env"]
            print(
                f"{names[str(row['impl'])]:<28} {row['fleet']:>8} {row['all_ready_s']:>12.2f} "
                f"{row['trainer_cpu_s']:>14.2f} {row['engine_cpu_s']:>13.2f} "
                f"{(f'{memory:.1f}' if memory is not None else 'n/a'):>12} "
                f"{row['stop_all_s']:>11.2f}"
            )
    if args.json:
        Path(args.json).write_text(json.dumps({"starts": records, "fleets": fleets}, indent=1))


if __name__ == "__main__":
    main()
