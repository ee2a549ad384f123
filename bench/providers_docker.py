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
    # two images side by side (e.g. one built by an older checkout), 3 rounds of 8 starts
    .venv/bin/python bench/providers_docker.py --image new:tag,old:tag --rounds 3 --starts 8

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
from typing import Any, Optional

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

    def __init__(self, python: str, impl: str, image: str, step: Optional[str] = None) -> None:
        env = dict(os.environ, PYTHONPYCACHEPREFIX="/tmp/openenv-bench-pycache")
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        self.impl = impl
        self.proc = subprocess.Popen(
            [python, str(TRAINER), "--impl", impl, "--image", image, "--paced"]
            + (["--step", step] if step else []),
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


def inside_starts(
    images: list[str], count: int, step: Optional[str] = None
) -> dict[str, list[dict[str, float]]]:
    """Start each image's own command `count` times inside a running container of it (hardened
    as our provider runs it), alternating the images: the server's part of a start."""
    commands = {}
    for image in images:
        out = subprocess.run(
            ["docker", "image", "inspect", "--format", "{{json .Config.Cmd}}", image],
            capture_output=True,
            text=True,
            check=True,
        )
        commands[image] = json.loads(out.stdout)
    rows: dict[str, list[dict[str, float]]] = {image: [] for image in images}
    for i in range(count):
        for image in images if i % 2 == 0 else images[::-1]:
            run = [
                "docker", "run", "--rm", "--read-only", "--tmpfs", "/tmp", "--cap-drop", "ALL",
                "--security-opt", "no-new-privileges", "--user", "65534:65534",
                *(["-e", f"BENCH_STEP={step}"] if step is not None else []),
                "-v", f"{REPO / 'bench'}:/bench:ro", "--entrypoint", "python", image,
                "/bench/_docker_server_start.py", *commands[image],
            ]  # fmt: skip
            out = subprocess.run(run, capture_output=True, text=True, timeout=300)
            if out.returncode != 0:
                raise SystemExit(f"{image}: {out.stderr[-2000:]}")
            rows[image].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(f"inside {i + 1}/{count}", file=sys.stderr, end="\r")
    return rows


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--image",
        default="openenv-echo:bench-providers",
        help="image; several (comma-separated) are measured side by side, starts alternating",
    )
    parser.add_argument("--starts", type=int, default=20, help="measured starts per side")
    parser.add_argument(
        "--rounds", type=int, default=1, help="repeat the starts this many times; medians shown"
    )
    parser.add_argument("--impls", default="ours,openenv")
    parser.add_argument("--openenv-python", default=None)
    parser.add_argument(
        "--fleet", default="", help="also start this many at once, e.g. 1,32 (comma-separated)"
    )
    parser.add_argument(
        "--inside",
        type=int,
        default=0,
        help="also time the server's own start inside N containers of each image (no engine)",
    )
    parser.add_argument(
        "--step",
        default=None,
        help="the first step's action (JSON) for an image other than echo's, e.g. "
        '\'{"answer": "4"}\' for math_env',
    )
    parser.add_argument("--json", default=None, help="write every start's figures here")
    args = parser.parse_args()
    impls = args.impls.split(",")
    images = args.image.split(",")
    for image in images:
        ensure_image(image)
    pythons = {"ours": str(OUR_PYTHON), "ours-swarm": str(OUR_PYTHON)}
    if "openenv" in impls:
        pythons["openenv"] = args.openenv_python or openenv_python()
    sides = [(impl, image) for image in images for impl in impls]
    # Every trainer stays up; their starts alternate one by one (the first side alternates
    # too), so load from other jobs on the machine hits every side alike.
    trainers = {
        side: Trainer(pythons[side[0]], side[0], side[1], args.step)
        for side in sides
        if args.starts
    }
    records: dict[tuple[str, str], list[list[dict[str, float]]]] = {side: [] for side in sides}
    try:
        for round_ in range(args.rounds):
            for side in sides:
                records[side].append([])
            for i in range(args.starts):
                for side in sides if i % 2 == 0 else sides[::-1]:
                    records[side][-1].append(trainers[side].start())
                print(f"round {round_ + 1}: {i + 1}/{args.starts}", file=sys.stderr, end="\r")
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
        print(
            f"\n{args.starts} starts per side and round, {args.rounds} round(s), "
            f"load average {load:.1f} at the end; p50 and ready: median of the rounds' medians"
        )

        width = max(len(names[impl]) + len(image) + 3 for impl, image in sides)
        header = (
            f"{'provider (image)':<{width}} {'p50 s':>7} {'p95 s':>7} {'ready p50':>10} "
            f"{'trainer CPU s':>14} {'engine CPU s':>13} {'stop p50 s':>11}  p50 per round"
        )
        print(header)
        print("-" * len(header))
        p50: dict[tuple[str, str], float] = {}
        for side in sides:
            impl, image = side
            rounds = records[side]
            rows = [row for round_rows in rounds for row in round_rows]
            first = [row["first_step_s"] for row in rows]
            per_round = [statistics.median(r["first_step_s"] for r in rr) for rr in rounds]
            ready = [statistics.median(r["ready_s"] for r in rr) for rr in rounds]
            p50[side] = statistics.median(per_round)
            label = f"{names[impl]} ({image})"
            print(
                f"{label:<{width}} {p50[side]:>7.2f} {percentile(first, 0.95):>7.2f} "
                f"{statistics.median(ready):>10.2f} "
                f"{statistics.mean(row['trainer_cpu_s'] for row in rows):>14.3f} "
                f"{statistics.mean(row['engine_cpu_s'] for row in rows):>13.3f} "
                f"{statistics.median(row['stop_s'] for row in rows):>11.2f}  "
                + " ".join(f"{v:>5.2f}" for v in per_round)
            )

        for image in images:
            if ("ours", image) in p50 and ("openenv", image) in p50:
                ratio = p50[("openenv", image)] / p50[("ours", image)]
                print(f"\n{image}: OpenEnv p50 / ours p50: {ratio:.2f}x")
    inside = inside_starts(images, args.inside, args.step) if args.inside else {}
    fleets = []
    for size in [int(n) for n in args.fleet.split(",") if n]:
        for impl, image in sides:
            fleets.append(fleet(pythons[impl], impl, image, size))
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
    if inside:
        print(
            f"\nInside the container ({args.inside} per image, medians): the image's command "
            "started by a script in the running container"
        )
        print(
            f"{'image':<40} {'to /health s':>13} {'to first step s':>16} "
            f"{'server CPU to /health s':>24} {'server CPU to step s':>21}"
        )
        for image, rows in inside.items():
            print(
                f"{image:<40} "
                + " ".join(
                    f"{statistics.median(r[key] for r in rows):>{width}.2f}"
                    for key, width in (
                        ("health_s", 13),
                        ("first_step_s", 16),
                        ("server_cpu_health_s", 24),
                        ("server_cpu_step_s", 21),
                    )
                )
            )
    if args.json:
        starts = {f"{impl}@{image}": rounds for (impl, image), rounds in records.items()}
        Path(args.json).write_text(
            json.dumps({"starts": starts, "inside": inside, "fleets": fleets}, indent=1)
        )


if __name__ == "__main__":
    main()
