"""One trainer process of `bench/providers_docker.py`: start an image N times through a
provider's OpenEnv-style methods, take one step, stop; print one JSON object per start.

Runs under either interpreter: ours (`--impl ours`, `ours-swarm`) or the published OpenEnv's
venv (`--impl openenv`). The same calls on both sides: `start_container`, `wait_for_ready`, a
reset and one echo step over a raw WebSocket (the same frames for both), `stop_container`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Optional

from websockets.sync.client import connect

RESET = json.dumps({"type": "reset", "data": {}})
ECHO_ACTION = {"type": "call_tool", "tool_name": "echo_message", "arguments": {"message": "hi"}}
#: The first step's frame; `--step` sets another environment's action.
ECHO_STEP = STEP = json.dumps({"type": "step", "data": ECHO_ACTION})


def cpu_self() -> float:
    """CPU seconds of this process and its waited-for children (OpenEnv runs the docker CLI)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def engine_pids() -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/comm") as f:
                    if f.read().strip() in ("dockerd", "containerd"):
                        pids.append(int(entry))
            except OSError:
                continue
    return pids


def cpu_engine(pids: list[int]) -> float:
    """CPU seconds of dockerd and containerd (not the per-container shims)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
            total += int(fields[11]) + int(fields[12])
        except OSError:
            continue
    return total / os.sysconf("SC_CLK_TCK")


def provider_for(impl: str):  # type: ignore[no-untyped-def]
    if impl == "openenv":
        from openenv.core.containers.runtime.providers import LocalDockerProvider

        return LocalDockerProvider()
    if impl == "ours-swarm":
        from openenv.providers.swarm import DockerSwarmProvider

        return DockerSwarmProvider()
    from openenv.providers.docker import LocalDockerProvider as Ours

    return Ours()


def first_step(base_url: str) -> None:
    ws_url = "ws://" + base_url.split("://", 1)[1] + "/ws"
    with connect(ws_url, max_size=None, proxy=None) as ws:
        ws.send(RESET)
        reply = ws.recv()
        assert '"error"' not in str(reply)[:20], reply
        ws.send(STEP)
        reply = ws.recv()
        assert '"error"' not in str(reply)[:20], reply
        assert STEP != ECHO_STEP or '"hi"' in str(reply), reply


def one_start(impl: str, image: str, engine: list[int]) -> dict[str, object]:
    provider = provider_for(impl)
    cpu0, eng0, t0 = cpu_self(), cpu_engine(engine), time.perf_counter()
    url = provider.start_container(image)
    provider.wait_for_ready(url, timeout_s=120)
    t_ready = time.perf_counter()
    first_step(url)
    t_step = time.perf_counter()
    cpu1, eng1 = cpu_self(), cpu_engine(engine)
    provider.stop_container()
    return {
        "impl": impl,
        "ready_s": t_ready - t0,
        "first_step_s": t_step - t0,
        "trainer_cpu_s": cpu1 - cpu0,
        "engine_cpu_s": eng1 - eng0,
        "stop_s": time.perf_counter() - t_step,
    }


def container_memory(container_id: str) -> Optional[int]:
    """Bytes a container holds, as `docker stats` counts them: usage minus inactive page
    cache (cgroup v1 or v2); None when its cgroup is not found."""
    for folder, usage_file, inactive_key in (
        (
            f"/sys/fs/cgroup/memory/docker/{container_id}",
            "memory.usage_in_bytes",
            "total_inactive_file",
        ),
        (
            f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope",
            "memory.current",
            "inactive_file",
        ),
    ):
        try:
            with open(f"{folder}/{usage_file}") as f:
                usage = int(f.read())
            with open(f"{folder}/memory.stat") as f:
                stat = dict(line.split() for line in f)
        except OSError:
            continue
        return usage - int(stat.get(inactive_key, 0))
    return None


def fleet(impl: str, image: str, size: int, engine: list[int]) -> dict[str, object]:
    """Start `size` environments at once; time until all answer; memory of each held idle with
    one open session; then stop them all."""
    from concurrent.futures import ThreadPoolExecutor

    providers = [provider_for(impl) for _ in range(size)]

    def start(provider) -> str:  # type: ignore[no-untyped-def]
        url = provider.start_container(image)
        provider.wait_for_ready(url, timeout_s=600)
        return url

    def stop_all() -> float:
        t = time.perf_counter()
        with ThreadPoolExecutor(size) as pool:
            list(pool.map(lambda p: p.stop_container(), providers))
        return time.perf_counter() - t

    cpu0, eng0, t0 = cpu_self(), cpu_engine(engine), time.perf_counter()
    with ThreadPoolExecutor(size) as pool:
        futures = [pool.submit(start, p) for p in providers]
    errors = [f.exception() for f in futures if f.exception() is not None]
    if errors:
        stop_all()  # whatever did start
        lines = str(errors[0]).strip().splitlines() or [type(errors[0]).__name__]
        reason = next((line for line in lines if "rror" in line), lines[0])
        return {"impl": impl, "fleet": size, "failed": f"{len(errors)} failed: {reason[:160]}"}
    urls = [f.result() for f in futures]
    all_ready = time.perf_counter() - t0
    cpu1, eng1 = cpu_self(), cpu_engine(engine)
    sessions = []
    for url in urls:
        ws = connect("ws://" + url.split("://", 1)[1] + "/ws", max_size=None, proxy=None)
        ws.send(RESET)
        ws.recv()
        sessions.append(ws)
    time.sleep(2.0)
    ids = [
        getattr(p, "_container_id", None) or p.started()[0].info["container_id"] for p in providers
    ]
    memory = [m for m in (container_memory(i) for i in ids) if m is not None]
    for ws in sessions:
        ws.close()
    stop_s = stop_all()
    return {
        "impl": impl,
        "fleet": size,
        "all_ready_s": all_ready,
        "trainer_cpu_s": cpu1 - cpu0,
        "engine_cpu_s": eng1 - eng0,
        "idle_mb_per_env": (sum(memory) / len(memory) / 2**20) if memory else None,
        "stop_all_s": stop_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--impl", choices=["ours", "ours-swarm", "openenv"], required=True)
    parser.add_argument("--image", required=True)
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument(
        "--paced", action="store_true", help="one start per line read on stdin (after a warm-up)"
    )
    parser.add_argument("--fleet", type=int, default=0, help="start this many at once instead")
    parser.add_argument("--step", default=None, help="the first step's action (JSON); echo's")
    args = parser.parse_args()
    if args.step:
        global STEP
        STEP = json.dumps({"type": "step", "data": json.loads(args.step)})
    engine = engine_pids()
    if args.fleet:
        one_start(args.impl, args.image, engine)  # warm-up: imports and first-use costs
        print(json.dumps(fleet(args.impl, args.image, args.fleet, engine)), flush=True)
        return
    # One start not measured: imports and first-use costs of this process.
    one_start(args.impl, args.image, engine)
    print(json.dumps({"ready": True}), flush=True)
    if args.paced:
        for _ in sys.stdin:
            print(json.dumps(one_start(args.impl, args.image, engine)), flush=True)
        return
    for _ in range(args.starts):
        print(json.dumps(one_start(args.impl, args.image, engine)), flush=True)


if __name__ == "__main__":
    main()
