"""Fairness: one flooding connection against another session's step latency.

Starts our server (`plain_env:app`, served through `runner.run_server`, so with the options
every serve path uses) pinned to one CPU, then measures a victim session's sequential step
latency (p50/p99) with nothing else running, and again while one flooder (its own process, on
another CPU) does each of:

- `invalid`: invalid frames (not JSON) as fast as it can, ~20k/s or more, reading the replies;
- `huge`: frames just over `max_message_bytes` (rejected unread) alternating with frames just
  under it (a JSON string: parsed, then rejected);
- `no-read`: pipelined valid steps, never reading a reply.

A flooder whose connection the server closes connects again at once (an attacker would), so
the flood lasts the whole phase. The goal (issue 11): p99 under each flood within 3x unloaded.

    .venv/bin/python bench/fairness.py
    .venv/bin/python bench/fairness.py --quick
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import multiprocessing
import os
import select
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table
from websockets.asyncio.client import connect

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
KINDS = ("invalid", "huge", "no-read")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(port: int, cpus: set[int], max_message_bytes: int) -> subprocess.Popen:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")]),
        "OPENENV_LOG_LEVEL": "warning",
        "OPENENV_MAX_MESSAGE_BYTES": str(max_message_bytes),
        "MAX_CONCURRENT_ENVS": "64",
    }
    code = (
        "import os,sys; os.sched_setaffinity(0, {cpus}) if {cpus} else None\n"
        "from openenv.core.env_server.runner import run_server\n"
        "run_server('plain_env:app', port={port})\n"
    ).format(cpus=sorted(cpus) and set(cpus), port=port)
    process = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=HERE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        if process.poll() is not None:
            raise SystemExit("the server exited while starting")
        time.sleep(0.1)
    process.kill()
    raise SystemExit("the server did not start")


# -- the flooder (its own process) ------------------------------------------------------------


def _frame(payload: bytes, opcode: int = 0x1) -> bytes:
    n = len(payload)
    if n < 126:
        header = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
    elif n < 65536:
        header = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
    else:
        header = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
    return header + b"\0\0\0\0" + payload  # an all-zero mask leaves the payload as is


def _raw_connect(port: int, rcvbuf: int | None = None) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(30)
    sock.connect(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        (
            f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError("closed during the handshake")
        head += chunk
    if not head.startswith(b"HTTP/1.1 101"):
        raise ConnectionError(head[:80].decode(errors="replace"))
    return sock


def _drain(sock: socket.socket, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            ready, _, _ = select.select([sock], [], [], 0.5)
            if ready and not sock.recv(1 << 20):
                return
        except (OSError, ValueError):
            return


def _close_on_stop(sock: socket.socket, stop: Any, done: threading.Event) -> None:
    """Unblock a `sendall` the server makes wait, once the phase is over."""
    while not done.is_set():
        if stop.wait(0.2):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            return


def flood(
    kind: str, port: int, limit: int, cpus: set[int], ready: Any, stop: Any, out: Any
) -> None:
    """Flood until `stop` is set; put (frames sent, connections opened) in `out`."""
    if cpus:
        os.sched_setaffinity(0, cpus)
    if kind == "invalid":
        batch = _frame(b"this is not json") * 200
        per_batch = 200
    elif kind == "huge":
        over = _frame(b"x" * (limit + 1))
        under = _frame(b'"' + b"y" * (limit - 64) + b'"')
        batch, per_batch = over + under, 2
    else:
        batch = b"".join(
            _frame(json.dumps({"type": "step", "data": {"value": i}}).encode()) for i in range(200)
        )
        per_batch = 200
    sent = connections = 0
    signalled = False
    while not stop.is_set():
        try:
            sock = _raw_connect(port, rcvbuf=4096 if kind == "no-read" else None)
        except OSError:
            time.sleep(0.01)
            continue
        connections += 1
        drained = threading.Event()
        reader = None
        if kind != "no-read":
            reader = threading.Thread(target=_drain, args=(sock, drained), daemon=True)
            reader.start()
        else:
            sock.sendall(_frame(b'{"type": "reset", "data": {}}'))
        sock.settimeout(None)  # a server that stops reading makes us wait, as it should
        watcher = threading.Thread(target=_close_on_stop, args=(sock, stop, drained), daemon=True)
        watcher.start()
        try:
            while not stop.is_set():
                sock.sendall(batch)
                sent += per_batch
                if not signalled:
                    ready.set()
                    signalled = True
        except OSError:
            pass  # closed by the server: connect again
        finally:
            drained.set()
            sock.close()
            if reader is not None:
                reader.join(1)
    out.put((sent, connections))


# -- the victim -------------------------------------------------------------------------------


async def victim(port: int, seconds: float, steps_min: int) -> list[float]:
    """Sequential step latencies (seconds) of one session for `seconds` (and `steps_min`)."""
    latencies: list[float] = []
    async with connect(
        f"ws://127.0.0.1:{port}/ws", max_size=None, compression=None, proxy=None
    ) as ws:
        await ws.send('{"type": "reset", "data": {}}')
        await ws.recv()
        message = '{"type": "step", "data": {"value": 1}}'
        for _ in range(50):  # warm-up
            await ws.send(message)
            await ws.recv()
        end = time.perf_counter() + seconds
        while time.perf_counter() < end or len(latencies) < steps_min:
            start = time.perf_counter()
            await ws.send(message)
            reply = await ws.recv()
            latencies.append(time.perf_counter() - start)
            if '"observation"' not in str(reply)[:40]:
                raise RuntimeError(f"unexpected reply: {str(reply)[:200]}")
    return latencies


def _rate(per_s: float) -> str:
    return f"{per_s:,.0f}" if per_s >= 10 else f"{per_s:.2f}"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(
    kind: str | None, port: int, args: argparse.Namespace, flood_cpus: set[int]
) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    process = None
    if kind is not None:
        ready, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
        process = ctx.Process(
            target=flood, args=(kind, port, args.max_message_bytes, flood_cpus, ready, stop, out)
        )
        process.start()
        if not ready.wait(60):
            raise SystemExit(f"the {kind} flooder never got going")
    started = time.perf_counter()
    try:
        latencies = asyncio.run(victim(port, args.seconds, args.steps_min))
    finally:
        elapsed = time.perf_counter() - started
        sent = connections = 0
        if process is not None:
            stop.set()
            try:
                sent, connections = out.get(timeout=30)
            except Exception:
                pass
            process.join(30)
            if process.is_alive():
                process.kill()
    return {
        "kind": kind or "unloaded",
        "steps": len(latencies),
        "p50_ms": statistics.median(latencies) * 1e3,
        "p99_ms": percentile(latencies, 0.99) * 1e3,
        "max_ms": max(latencies) * 1e3,
        "flood_per_s": sent / elapsed if elapsed else 0.0,
        "connections": connections,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="victim time per phase")
    parser.add_argument(
        "--steps-min", type=int, default=500, help="victim steps per phase, at least"
    )
    parser.add_argument("--max-message-bytes", type=int, default=8 * 1024 * 1024)
    parser.add_argument("--kinds", default=",".join(KINDS), help="floods to run")
    parser.add_argument("--quick", action="store_true", help="short phases, 1 MB message limit")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.steps_min, args.max_message_bytes = 1.0, 100, 1024 * 1024
    kinds = [k for k in args.kinds.split(",") if k]
    for kind in kinds:
        if kind not in KINDS:
            parser.error(f"unknown flood {kind!r}; choose from {', '.join(KINDS)}")
    cpus = sorted(os.sched_getaffinity(0))
    server_cpus = {cpus[0]} if len(cpus) >= 2 else set()
    client_cpus = set(cpus[1:]) if len(cpus) >= 2 else set()
    if client_cpus:
        os.sched_setaffinity(0, client_cpus)
    port = _free_port()
    server = start_server(port, server_cpus, args.max_message_bytes)
    try:
        rows = [measure(None, port, args, client_cpus)]
        for kind in kinds:
            rows.append(measure(kind, port, args, client_cpus))
            # the server is still healthy after each flood
            assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=30).status_code == 200
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
    base = rows[0]
    table = Table(title="Victim step latency with one flooding client (goal: p99 ratio <= 3)")
    for column in ("flood", "steps", "p50 ms", "p99 ms", "max ms", "p50 x", "p99 x"):
        table.add_column(column, justify="left" if column == "flood" else "right")
    table.add_column("flooder sent/s", justify="right")
    table.add_column("flooder connections", justify="right")
    for row in rows:
        row["p50_ratio"] = row["p50_ms"] / base["p50_ms"]
        row["p99_ratio"] = row["p99_ms"] / base["p99_ms"]
        table.add_row(
            row["kind"],
            str(row["steps"]),
            f"{row['p50_ms']:.2f}",
            f"{row['p99_ms']:.2f}",
            f"{row['max_ms']:.1f}",
            f"{row['p50_ratio']:.2f}",
            f"{row['p99_ratio']:.2f}",
            _rate(row["flood_per_s"]) if row["kind"] != "unloaded" else "-",
            str(row["connections"]) if row["kind"] != "unloaded" else "-",
        )
    Console(width=140).print(table)
    print(
        f"server CPU {sorted(server_cpus) or 'any'}, clients {sorted(client_cpus) or 'any'}, "
        f"max_message_bytes {args.max_message_bytes}"
    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"rows": rows, "max_message_bytes": args.max_message_bytes}, fh, indent=2)


if __name__ == "__main__":
    main()
