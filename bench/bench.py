#!/usr/bin/env python
"""Step latency, throughput and idle-session memory of OpenEnv-protocol servers.

Measures any server that speaks the OpenEnv WebSocket protocol (`--url`), or, with `--compare`,
starts our server, the published OpenEnv server and a bare ASGI WebSocket floor itself and
compares them. The load generator sends raw OpenEnv frames (`{"type":"step","data":{...}}`) from
separate client processes, so the same generator measures every server.

    python bench/bench.py --compare                     # the full comparison (~15 minutes)
    python bench/bench.py --url http://127.0.0.1:8000 --action mcp --server-pid 1234

See bench/README.md for what each figure means.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import http.client
import importlib.util
import json
import multiprocessing as mp
import os
import queue
import random
import resource
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
OUR_PYTHON = os.path.join(REPO, ".venv", "bin", "python")


def published_openenv_python() -> str:
    """The published openenv's venv (the one the compat tests build), with the same fast loop and
    HTTP parser as ours so both servers run the same uvicorn code."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.compat.compat_venv import ensure_compat_venv

    python = ensure_compat_venv()
    missing = subprocess.run(
        [python, "-c", "import uvloop, httptools"], capture_output=True
    ).returncode
    if missing:
        subprocess.run(
            ["uv", "pip", "install", "--python", python, "uvloop==0.23.0", "httptools==0.9.0"],
            check=True,
            capture_output=True,
        )
    return python


MCP_ACTION = {"type": "call_tool", "tool_name": "echo_message", "arguments": {"message": "hi"}}
PLAIN_ACTION = {"value": 1}
ACTIONS: dict[str, dict[str, Any]] = {"mcp": MCP_ACTION, "plain": PLAIN_ACTION}
RESET_FRAME = b'{"type":"reset","data":{}}'
ERROR_PREFIX = b'{"type":"error"'
SESSION_HEADER = "X-OpenEnv-Session-Id"
CONCURRENCY_LEVELS = (1, 8, 64, 256)


# ---------------------------------------------------------------------------------------------
# /proc readings and limits
# ---------------------------------------------------------------------------------------------


def proc_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads), from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rpartition(")")[2].split()
    # fields[0] is field 3 (state); utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_switches(pid: int) -> int:
    """Context switches of a process's live threads (a thread that exited takes its own)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as fh:
                for line in fh:
                    if line.startswith(("voluntary_ctxt", "nonvoluntary_ctxt")):
                        total += int(line.split()[1])
        except FileNotFoundError:
            pass  # exited meanwhile
    return total


def proc_rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def proc_threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return 0


def raise_nofile() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(q / 100 * (len(sorted_values) - 1))))
    return sorted_values[index]


# ---------------------------------------------------------------------------------------------
# WebSocket clients: a minimal frame-level client ("fast") and the `websockets` library
# ---------------------------------------------------------------------------------------------


def ws_url(url: str) -> str:
    parts = urlsplit(url if "://" in url else f"http://{url}")
    scheme = "wss" if parts.scheme in ("https", "wss") else "ws"
    path = parts.path.rstrip("/")
    if not path.endswith("/ws"):
        path += "/ws"
    return f"{scheme}://{parts.netloc}{path}"


def host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url if "://" in url else f"http://{url}")
    return parts.hostname or "127.0.0.1", parts.port or 80


class FastWS(asyncio.Protocol):
    """A request/response WebSocket client written against the frame format (RFC 6455).

    Text frames are sent masked with a zero key (a no-op XOR, valid on the wire), replies are
    parsed straight out of the receive buffer. It costs the client far less CPU per step than a
    general-purpose library, so more of the shared CPUs is left to the server under test.
    """

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.handshake: asyncio.Future[None] | None = None
        self.waiter: asyncio.Future[bytes] | None = None
        self.pending: list[bytes] = []
        self.fragment: bytearray | None = None
        self.closed = False

    @classmethod
    async def open(cls, url: str, timeout: float = 30.0) -> FastWS:
        parts = urlsplit(ws_url(url))
        loop = asyncio.get_running_loop()
        proto = cls()
        proto.handshake = loop.create_future()
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        await asyncio.wait_for(loop.create_connection(lambda: proto, host, port), timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        request = (
            f"GET {target} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        assert proto.transport is not None
        proto.transport.write(request.encode())
        try:
            await asyncio.wait_for(proto.handshake, timeout)
        except BaseException:
            proto.transport.close()
            raise
        return proto

    # asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        error = ConnectionError(f"connection lost: {exc}" if exc else "connection closed")
        for fut in (self.handshake, self.waiter):
            if fut is not None and not fut.done():
                fut.set_exception(error)

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        handshake = self.handshake
        if handshake is not None and not handshake.done():
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(buf[:end])
            del buf[: end + 4]
            if not head.startswith(b"HTTP/1.1 101"):
                handshake.set_exception(ConnectionError(head.split(b"\r\n")[0].decode()))
                return
            handshake.set_result(None)
        while len(buf) >= 2:
            b0, b1 = buf[0], buf[1]
            length = b1 & 0x7F
            offset = 2
            if length == 126:
                if len(buf) < 4:
                    return
                length = int.from_bytes(buf[2:4], "big")
                offset = 4
            elif length == 127:
                if len(buf) < 10:
                    return
                length = int.from_bytes(buf[2:10], "big")
                offset = 10
            if len(buf) < offset + length:
                return
            payload = bytes(buf[offset : offset + length])
            del buf[: offset + length]
            opcode = b0 & 0x0F
            if opcode in (1, 2):
                if b0 & 0x80:
                    self._deliver(payload)
                else:
                    self.fragment = bytearray(payload)
            elif opcode == 0 and self.fragment is not None:
                self.fragment += payload
                if b0 & 0x80:
                    self._deliver(bytes(self.fragment))
                    self.fragment = None
            elif opcode == 9:  # ping
                self._write(0xA, payload)
            elif opcode == 8:  # close
                self.closed = True
                if self.transport is not None:
                    self.transport.close()
                return

    def _deliver(self, payload: bytes) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(payload)
        else:
            self.pending.append(payload)

    def _write(self, opcode: int, payload: bytes) -> None:
        n = len(payload)
        if n < 126:
            header = bytes((0x80 | opcode, 0x80 | n))
        elif n < 65536:
            header = bytes((0x80 | opcode, 0x80 | 126)) + n.to_bytes(2, "big")
        else:
            header = bytes((0x80 | opcode, 0x80 | 127)) + n.to_bytes(8, "big")
        assert self.transport is not None
        self.transport.write(header + b"\x00\x00\x00\x00" + payload)

    # request/response --------------------------------------------------------------------

    async def request(self, payload: bytes) -> bytes:
        if self.pending:
            return self.pending.pop(0)
        if self.closed:
            raise ConnectionError("connection closed")
        fut = asyncio.get_running_loop().create_future()
        self.waiter = fut
        self._write(0x1, payload)
        return await fut

    async def close(self) -> None:
        if not self.closed and self.transport is not None:
            self.closed = True
            with contextlib.suppress(Exception):
                self._write(0x8, (1000).to_bytes(2, "big"))
            self.transport.close()


class LibWS:
    """The same interface on top of the `websockets` library client."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    @classmethod
    async def open(cls, url: str, timeout: float = 30.0) -> LibWS:
        from websockets.asyncio.client import connect

        conn = await connect(
            ws_url(url),
            compression=None,
            max_size=None,
            ping_interval=None,
            open_timeout=timeout,
            close_timeout=2,
            proxy=None,
        )
        return cls(conn)

    async def request(self, payload: bytes) -> bytes:
        await self.conn.send(payload, text=True)
        return await self.conn.recv(decode=False)

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.conn.close()


CLIENTS: dict[str, type] = {"fast": FastWS, "websockets": LibWS}


def _client_setup(cfg: dict[str, Any]) -> None:
    if cfg.get("cpus"):
        os.sched_setaffinity(0, set(cfg["cpus"]))
    raise_nofile()


def _run_async(coro: Any) -> Any:
    if importlib.util.find_spec("uvloop"):
        import uvloop

        return uvloop.run(coro)
    return asyncio.run(coro)


# ---------------------------------------------------------------------------------------------
# Client processes (spawned). Each reports on queues; the parent reads the server's CPU clock
# between "go" and the last result, so the CPU window matches the measured steps.
# ---------------------------------------------------------------------------------------------


def ws_load_worker(cfg: dict[str, Any], ready_q: Any, go: Any, result_q: Any, release: Any) -> None:
    """Open `sessions` WebSocket sessions, reset each, then step them all until the time is up."""
    _client_setup(cfg)
    _run_async(_ws_load(cfg, ready_q, go, result_q, release))


async def _ws_load(cfg: dict[str, Any], ready_q: Any, go: Any, result_q: Any, release: Any) -> None:
    client = CLIENTS[cfg["client"]]
    # Open loop: a session steps every `interval` seconds (it "thinks" in between), whatever
    # the latency; closed loop (None): it steps again as soon as it is answered.
    interval: float | None = cfg.get("interval")
    frame = json.dumps({"type": "step", "data": cfg["action"]}, separators=(",", ":")).encode()
    loop = asyncio.get_running_loop()
    gate = asyncio.Semaphore(64)
    errors: list[str] = []

    async def open_one() -> Any:
        async with gate:
            conn = await client.open(cfg["url"])
            reply = await conn.request(RESET_FRAME)
            if reply.startswith(ERROR_PREFIX):
                await conn.close()
                raise RuntimeError(f"reset failed: {reply[:300].decode(errors='replace')}")
            for _ in range(cfg["warmup"]):
                await conn.request(frame)
            return conn

    try:
        conns = await asyncio.gather(*(open_one() for _ in range(cfg["sessions"])))
    except Exception as exc:
        ready_q.put({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
        return
    ready_q.put({"ok": True})
    await loop.run_in_executor(None, go.wait)
    duration = cfg["duration"]
    pc = time.perf_counter
    cpu0 = time.process_time()
    start = pc()
    stop_at = start + duration
    latencies: list[float] = []
    record = latencies.append
    counts = {"steps": 0, "errors": 0}

    async def drive(conn: Any) -> None:
        steps = 0
        # Sessions start at random phases so the aggregate rate is even, not in bursts.
        next_at = start + random.uniform(0, interval) if interval else 0.0
        try:
            while True:
                if interval:
                    if next_at >= stop_at:
                        break  # (sleeping past the end would stretch the elapsed time)
                    wait = next_at - pc()
                    if wait > 0:
                        await asyncio.sleep(wait)
                    next_at += interval  # behind schedule: the next step is sent at once
                t0 = pc()
                if t0 >= stop_at:
                    break
                reply = await conn.request(frame)
                record(pc() - t0)
                steps += 1
                if reply.startswith(ERROR_PREFIX):
                    counts["errors"] += 1
                    if len(errors) < 3:
                        errors.append(reply[:300].decode(errors="replace"))
        except Exception as exc:
            counts["errors"] += 1
            if len(errors) < 3:
                errors.append(f"{type(exc).__name__}: {exc}")
        counts["steps"] += steps

    await asyncio.gather(*(drive(c) for c in conns))
    elapsed = pc() - start
    result_q.put(
        {
            "client_cpu": time.process_time() - cpu0,
            "steps": counts["steps"],
            "errors": counts["errors"],
            "error_samples": errors,
            "elapsed": elapsed,
            "latencies": latencies,
        }
    )
    await loop.run_in_executor(None, release.wait)
    await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)


def http_load_worker(
    cfg: dict[str, Any], ready_q: Any, go: Any, result_q: Any, release: Any
) -> None:
    """One HTTP session (POST /reset with session id `new`, then POST /step), keep-alive."""
    _client_setup(cfg)
    host, port = host_port(cfg["url"])
    conn = http.client.HTTPConnection(host, port, timeout=30)
    conn.connect()
    assert conn.sock is not None
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    prefix = urlsplit(cfg["url"] if "://" in cfg["url"] else f"http://{cfg['url']}").path
    prefix = prefix.rstrip("/")

    def post(path: str, body: bytes, sid: str) -> tuple[int, str | None, bytes]:
        headers = {"Content-Type": "application/json", SESSION_HEADER: sid}
        conn.request("POST", prefix + path, body, headers)
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, resp.getheader(SESSION_HEADER), data

    try:
        status, sid, data = post("/reset", b"{}", "new")
    except Exception as exc:
        ready_q.put({"ok": False, "na": True, "error": f"{type(exc).__name__}: {exc}"})
        return
    if status != 200 or not sid:
        reason = "no HTTP sessions (no session id in the /reset reply)"
        if status != 200:
            reason = f"/reset answered {status}: {data[:200].decode(errors='replace')}"
        ready_q.put({"ok": False, "na": True, "error": reason})
        return
    body = json.dumps({"action": cfg["action"]}, separators=(",", ":")).encode()
    for _ in range(cfg["warmup"]):
        post("/step", body, sid)
    ready_q.put({"ok": True})
    go.wait()
    pc = time.perf_counter
    latencies: list[float] = []
    errors: list[str] = []
    n_errors = 0
    cpu0 = time.process_time()
    start = pc()
    stop_at = start + cfg["duration"]
    while True:
        t0 = pc()
        if t0 >= stop_at:
            break
        status, _, data = post("/step", body, sid)
        latencies.append(pc() - t0)
        if status != 200:
            n_errors += 1
            if len(errors) < 3:
                errors.append(f"{status}: {data[:200].decode(errors='replace')}")
    elapsed = pc() - start
    result_q.put(
        {
            "client_cpu": time.process_time() - cpu0,
            "steps": len(latencies),
            "errors": n_errors,
            "error_samples": errors,
            "elapsed": elapsed,
            "latencies": latencies,
        }
    )
    release.wait()
    with contextlib.suppress(Exception):
        conn.request("DELETE", f"{prefix}/sessions/{sid}")
        conn.getresponse().read()
    conn.close()


def idle_worker(cfg: dict[str, Any], status_q: Any, cmd_q: Any) -> None:
    """Open up to `sessions` WebSocket sessions (connect + reset), hold them, check, close."""
    _client_setup(cfg)
    _run_async(_idle(cfg, status_q, cmd_q))


async def _idle(cfg: dict[str, Any], status_q: Any, cmd_q: Any) -> None:
    client = CLIENTS[cfg["client"]]
    index = cfg["index"]
    loop = asyncio.get_running_loop()
    gate = asyncio.Semaphore(cfg.get("handshakes", 32))
    conns: list[Any] = []
    state: dict[str, Any] = {
        "failed": 0,
        "consecutive": 0,
        "stop": False,
        "timed_out": False,
        "error": "",
    }
    deadline = time.monotonic() + cfg["timeout"]
    frame = json.dumps({"type": "step", "data": cfg["action"]}, separators=(",", ":")).encode()

    async def open_one() -> None:
        async with gate:
            if not state["stop"] and time.monotonic() > deadline:
                state["stop"] = True
                state["timed_out"] = True
            if state["stop"]:
                return
            try:
                conn = await client.open(cfg["url"])
                reply = await conn.request(RESET_FRAME)
                if reply.startswith(ERROR_PREFIX):
                    await conn.close()
                    raise RuntimeError(reply[:300].decode(errors="replace"))
            except Exception as exc:
                state["failed"] += 1
                state["consecutive"] += 1
                state["error"] = state["error"] or f"{type(exc).__name__}: {exc}"[:300]
                if state["consecutive"] >= 20:
                    state["stop"] = True
                return
            state["consecutive"] = 0
            conns.append(conn)
            if len(conns) % 200 == 0:
                status_q.put(("progress", index, len(conns)))

    await asyncio.gather(*(open_one() for _ in range(cfg["sessions"])))
    error = state["error"]
    if state["timed_out"]:
        error = f"time limit ({cfg['timeout']:g}s) reached" + (f"; {error}" if error else "")
    status_q.put(("opened", index, len(conns), state["failed"], error))
    while True:
        command = await loop.run_in_executor(None, cmd_q.get)
        if command == "check":
            alive = 0

            async def check(conn: Any) -> bool:
                async with gate:
                    try:
                        reply = await asyncio.wait_for(conn.request(frame), 30)
                    except Exception:
                        return False
                    return not reply.startswith(ERROR_PREFIX)

            alive = sum(await asyncio.gather(*(check(c) for c in conns)))
            status_q.put(("checked", index, alive))
        else:
            await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)
            status_q.put(("closed", index))
            return


# ---------------------------------------------------------------------------------------------
# Parent-side measurements
# ---------------------------------------------------------------------------------------------

Tick = Callable[[float, str], None]


@dataclass
class Bench:
    """Settings shared by all measurements."""

    duration: float = 5.0
    client: str = "fast"
    client_procs: int = 2
    client_cpus: list[int] = field(default_factory=list)
    warmup: int = 20
    #: Aggregate steps/s of the open-loop phase ("open"), spread over its sessions.
    rate: float = 1000.0
    idle_sessions: int = 10000
    idle_timeout: float = 300.0
    idle_procs: int = 2


def _ctx() -> Any:
    return mp.get_context("spawn")


def _split(total: int, parts: int) -> list[int]:
    parts = max(1, min(parts, total))
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def _collect(
    q: Any,
    n: int,
    procs: list[Any],
    timeout: float,
    tick: Tick | None,
    what: str,
    start: float,
    span: float,
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while len(out) < n:
        if tick is not None and span > 0:
            tick(min(1.0, (time.monotonic() - start) / span), what)
        try:
            out.append(q.get(timeout=0.1))
        except queue.Empty:
            if time.monotonic() > deadline:
                raise TimeoutError(f"client processes did not report ({what})") from None
            if not any(p.is_alive() for p in procs) and q.empty():
                raise RuntimeError(f"client processes exited without reporting ({what})") from None
    return out


def _run_load(
    worker: Callable[..., None],
    cfgs: list[dict[str, Any]],
    server_pid: int | None,
    duration: float,
    tick: Tick | None,
    on_go: Callable[[], None] | None = None,
) -> dict[str, Any]:
    ctx = _ctx()
    ready_q, result_q = ctx.Queue(), ctx.Queue()
    go, release = ctx.Event(), ctx.Event()
    procs = [ctx.Process(target=worker, args=(c, ready_q, go, result_q, release)) for c in cfgs]
    for p in procs:
        p.start()
    try:
        readies = _collect(ready_q, len(procs), procs, 300, None, "connect", 0, 0)
        failed = [r for r in readies if not r["ok"]]
        if failed:
            release.set()
            go.set()
            return {"ok": False, "na": failed[0].get("na", False), "error": failed[0]["error"]}
        gc0 = gc_snapshot(server_pid)
        if on_go is not None:
            on_go()  # e.g. a profiler that should see steps only, not the sessions' set-up
        cpu0 = proc_cpu_seconds(server_pid) if server_pid else None
        switches0 = proc_switches(server_pid) if server_pid else None
        t0 = time.perf_counter()
        go.set()
        results = _collect(
            result_q, len(procs), procs, duration + 120, tick, "load", time.monotonic(), duration
        )
        t1 = time.perf_counter()
        cpu1 = proc_cpu_seconds(server_pid) if server_pid else None
        switches1 = proc_switches(server_pid) if server_pid else None
        gc1 = gc_snapshot(server_pid)
        release.set()
    finally:
        release.set()
        go.set()
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    steps = sum(r["steps"] for r in results)
    latencies = sorted(x for r in results for x in r["latencies"])
    out: dict[str, Any] = {
        "ok": True,
        "steps": steps,
        "errors": sum(r["errors"] for r in results),
        "error_samples": [e for r in results for e in r["error_samples"]][:3],
        "steps_per_s": sum(r["steps"] / r["elapsed"] for r in results if r["elapsed"] > 0),
        "p50_us": percentile(latencies, 50) * 1e6,
        "p99_us": percentile(latencies, 99) * 1e6,
        "client_cpu_pct": sum(r["client_cpu"] for r in results) / (t1 - t0) * 100,
        "load1": os.getloadavg()[0],
    }
    if cpu0 is not None and cpu1 is not None and steps:
        out["server_cpu_us_per_step"] = (cpu1 - cpu0) / steps * 1e6
        out["server_cpu_pct"] = (cpu1 - cpu0) / (t1 - t0) * 100
    if switches0 is not None and switches1 is not None and steps:
        out["server_switches_per_step"] = (switches1 - switches0) / steps
    if gc0 is not None and gc1 is not None:
        out["gc"] = {
            gen: {
                "count": gc1[gen]["count"] - gc0[gen]["count"],
                "ms": (gc1[gen]["total_s"] - gc0[gen]["total_s"]) * 1000,
                "max_ms": gc1[gen]["max_s"] * 1000,
            }
            for gen in ("0", "1", "2")
        }
    return out


def gc_snapshot(server_pid: int | None, timeout: float = 3.0) -> dict[str, Any] | None:
    """The server's collection totals per generation, from a server started by `_serve.py
    --gc-stats-file` (SIGUSR2 makes it write them); None for other servers."""
    if not server_pid:
        return None
    path = f"/tmp/bench-gc-{server_pid}.json"
    try:
        with open(path) as fh:
            seq = json.load(fh)["seq"]
        os.kill(server_pid, signal.SIGUSR2)
    except (OSError, ValueError, KeyError):
        return None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(path) as fh:
                data = json.load(fh)
            if data["seq"] > seq:
                return data["gens"]
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.005)
    return None


def measure_ws(
    bench: Bench,
    url: str,
    action: dict[str, Any],
    sessions: int,
    server_pid: int | None,
    tick: Tick | None = None,
    on_go: Callable[[], None] | None = None,
    rate: float | None = None,
) -> dict[str, Any]:
    """Closed loop (each session steps again once answered), or with `rate` open loop: the
    sessions together send `rate` steps/s, each one every `sessions / rate` seconds."""
    procs = 1 if sessions == 1 else bench.client_procs
    cfgs = [
        {
            "url": url,
            "action": action,
            "sessions": share,
            "duration": bench.duration,
            "client": bench.client,
            "cpus": bench.client_cpus,
            "warmup": bench.warmup if sessions < 64 else 2,
            "interval": sessions / rate if rate else None,
        }
        for share in _split(sessions, procs)
    ]
    result = _run_load(ws_load_worker, cfgs, server_pid, bench.duration, tick, on_go)
    if rate and result.get("ok"):
        result["target_rate"] = rate
    return result


def measure_http(
    bench: Bench, url: str, action: dict[str, Any], server_pid: int | None, tick: Tick | None = None
) -> dict[str, Any]:
    cfg = {
        "url": url,
        "action": action,
        "duration": bench.duration,
        "cpus": bench.client_cpus,
        "warmup": bench.warmup,
    }
    return _run_load(http_load_worker, [cfg], server_pid, bench.duration, tick)


def measure_idle(
    bench: Bench,
    url: str,
    action: dict[str, Any],
    server_pid: int | None,
    tick: Tick | None = None,
    on_held: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Open up to `bench.idle_sessions` sessions and hold them; RSS delta per session.

    `on_held` runs while the sessions are open (after the RSS reading), e.g. to snapshot memory.
    """
    ctx = _ctx()
    status_q = ctx.Queue()
    shares = _split(bench.idle_sessions, bench.idle_procs)
    cmd_qs = [ctx.Queue() for _ in shares]
    rss0 = proc_rss_kb(server_pid) if server_pid else None
    threads0 = proc_threads(server_pid) if server_pid else None
    procs = [
        ctx.Process(
            target=idle_worker,
            args=(
                {
                    "url": url,
                    "action": action,
                    "sessions": share,
                    "client": bench.client,
                    "cpus": bench.client_cpus,
                    "timeout": bench.idle_timeout,
                    "index": i,
                },
                status_q,
                cmd_qs[i],
            ),
        )
        for i, share in enumerate(shares)
    ]
    start = time.monotonic()
    for p in procs:
        p.start()
    progress = [0] * len(procs)
    opened: dict[int, tuple[int, int, str]] = {}
    checked: dict[int, int] = {}
    closed: set[int] = set()
    deadline = start + bench.idle_timeout + 120

    def pump(until: Callable[[], bool], what: str) -> None:
        while not until():
            if time.monotonic() > deadline:
                raise TimeoutError(f"idle clients did not report ({what})")
            try:
                msg = status_q.get(timeout=0.2)
            except queue.Empty:
                if not any(p.is_alive() for p in procs):
                    raise RuntimeError(f"idle clients exited ({what})") from None
                continue
            kind, index = msg[0], msg[1]
            if kind == "progress":
                progress[index] = msg[2]
            elif kind == "opened":
                opened[index] = (msg[2], msg[3], msg[4])
                progress[index] = msg[2]
            elif kind == "checked":
                checked[index] = msg[2]
            elif kind == "closed":
                closed.add(index)
            if tick is not None:
                tick(sum(progress) / bench.idle_sessions, f"{sum(progress)} sessions")

    try:
        pump(lambda: len(opened) == len(procs), "open")
        open_seconds = time.monotonic() - start
        held = sum(v[0] for v in opened.values())
        time.sleep(2.0)  # let the server settle (pending callbacks, freed buffers)
        rss1 = proc_rss_kb(server_pid) if server_pid else None
        threads1 = proc_threads(server_pid) if server_pid else None
        if on_held is not None:
            on_held()
        for q in cmd_qs:
            q.put("check")
        pump(lambda: len(checked) == len(procs), "check")
        for q in cmd_qs:
            q.put("close")
        pump(lambda: len(closed) == len(procs), "close")
    finally:
        for q in cmd_qs:
            with contextlib.suppress(Exception):
                q.put("close")
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    errors = [v[2] for v in opened.values() if v[2]]
    out: dict[str, Any] = {
        "ok": True,
        "target": bench.idle_sessions,
        "held": held,
        "alive": sum(checked.values()),
        "failed": sum(v[1] for v in opened.values()),
        "error": errors[0] if errors else "",
        "open_seconds": open_seconds,
        "sessions_per_s": held / open_seconds if open_seconds else 0.0,
    }
    if rss0 is not None and rss1 is not None:
        out.update(
            rss_before_kb=rss0,
            rss_after_kb=rss1,
            rss_per_session_kb=(rss1 - rss0) / held if held else float("nan"),
            threads_before=threads0,
            threads_after=threads1,
        )
    return out


# ---------------------------------------------------------------------------------------------
# Servers started by the bench
# ---------------------------------------------------------------------------------------------


@dataclass
class Target:
    key: str
    label: str
    impl: str  # "ours", "openenv" or "floor"
    app: str  # MODULE:ATTR for _serve.py
    action: str  # "mcp" or "plain"


TARGETS: dict[str, Target] = {
    t.key: t
    for t in (
        Target("floor", "floor (bare ASGI WS)", "floor", "floor_app:app", "plain"),
        Target("ours-echo", "ours: echo MCP", "ours", "echo_env.server.app:app", "mcp"),
        Target("openenv-echo", "OpenEnv: echo MCP", "openenv", "echo_env_openenv:app", "mcp"),
        Target("ours-plain", "ours: plain env", "ours", "plain_env:app", "plain"),
        Target("openenv-plain", "OpenEnv: plain env", "openenv", "plain_env_openenv:app", "plain"),
        # Variants (bench/whatif_apps.py): the plain env with the RUNS_ON_EVENT_LOOP opt-in, and
        # two what-if echo envs (not in the default --only list).
        Target(
            "ours-plain-onloop",
            "ours: plain env, RUNS_ON_EVENT_LOOP",
            "ours",
            "whatif_apps:plain_onloop",
            "plain",
        ),
        Target(
            "ours-echo-direct",
            "what-if: echo, direct tool call",
            "ours",
            "whatif_apps:echo_direct",
            "mcp",
        ),
        Target(
            "ours-echo-shared",
            "what-if: echo, shared FastMCP",
            "ours",
            "whatif_apps:echo_shared",
            "mcp",
        ),
        # Before/after of issue 18 items 1-2, on today's code: every tool call through
        # FastMCP.call_tool, no session heap freezing (OPENENV_SESSION_GC_FREEZE=0), and the
        # collector's young threshold left as it is (OPENENV_SESSION_GC_YOUNG=0).
        Target(
            "ours-echo-calltool",
            "before: echo via FastMCP.call_tool",
            "ours",
            "whatif_apps:echo_calltool",
            "mcp",
        ),
        Target(
            "ours-echo-nofreeze",
            "before: echo, no session freeze",
            "ours",
            "whatif_apps:echo_nofreeze",
            "mcp",
        ),
        Target(
            "ours-plain-nofreeze",
            "before: plain, no session freeze",
            "ours",
            "whatif_apps:plain_nofreeze",
            "plain",
        ),
        Target(
            "ours-echo-noyoung",
            "before: echo, young generation as is",
            "ours",
            "whatif_apps:echo_noyoung",
            "mcp",
        ),
        Target(
            "ours-plain-noyoung",
            "before: plain, young generation as is",
            "ours",
            "whatif_apps:plain_noyoung",
            "plain",
        ),
    )
}
DEFAULT_TARGETS = (
    "floor",
    "ours-echo",
    "openenv-echo",
    "ours-plain",
    "ours-plain-onloop",
    "openenv-plain",
)


def _has_modules(python: str, modules: list[str]) -> dict[str, bool]:
    code = (
        "import importlib.util, json, sys; "
        "print(json.dumps({m: bool(importlib.util.find_spec(m)) for m in sys.argv[1:]}))"
    )
    out = subprocess.run([python, "-c", code, *modules], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


#: What `uvicorn.run(app)` picks in a venv holding only what the published `openenv` requires
#: (`uvicorn` without the `standard` extra: no uvloop, no httptools). OpenEnv's servers start
#: that way (`uvicorn.run(app, host=..., port=...)`).
AS_SHIPPED_UVICORN: dict[str, Any] = {"loop": "asyncio", "http": "h11", "ws": "auto"}


def uvicorn_settings(pythons: list[str], log_level: str) -> tuple[dict[str, Any], list[str]]:
    """Our runner's uvicorn options, downgraded to what every interpreter has installed."""
    from openenv.core.env_server.runner import uvicorn_options

    options = uvicorn_options()
    options["log_level"] = log_level
    # Every server gets the same protocol implementations, by name: the connection-limit
    # subclasses our runner passes (timers per connection, not per message) are not JSON and do
    # not exist in OpenEnv's interpreter.
    options["http"] = "httptools" if importlib.util.find_spec("httptools") else "h11"
    options["ws"] = "websockets-sansio" if importlib.util.find_spec("websockets") else "auto"
    notes = []
    needs = {"loop": ("uvloop", "asyncio"), "http": ("httptools", "h11")}
    for python in pythons:
        have = _has_modules(python, ["uvloop", "httptools", "websockets"])
        for key, (module, fallback) in needs.items():
            if options[key] == module and not have[module]:
                options[key] = fallback
                notes.append(f"{python} lacks {module}: {key}={fallback} for every server")
        if not have["websockets"] and options["ws"] != "auto":
            options["ws"] = "auto"
            notes.append(f"{python} lacks websockets: ws=auto for every server")
    return options, notes


def git_revision() -> str:
    """The checked-out commit of the repository (with '+dirty' when src/ or envs/ differ)."""
    try:
        head = subprocess.run(
            ["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", REPO, "status", "--porcelain", "src", "envs"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    def __init__(
        self,
        target: Target,
        python: str,
        options: dict[str, Any],
        cpus: list[int],
        max_envs: int,
        log_dir: str,
        extra_args: list[str] | None = None,
    ) -> None:
        self.target = target
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ)
        env["MAX_CONCURRENT_ENVS"] = str(max_envs)
        env["PYTHONUNBUFFERED"] = "1"
        env.pop("ENABLE_WEB_INTERFACE", None)
        env.pop("OPENENV_MODE", None)
        cmd = [
            python,
            os.path.join(HERE, "_serve.py"),
            target.app,
            "--port",
            str(self.port),
            "--uvicorn-json",
            json.dumps(options),
            *(["--cpus", ",".join(map(str, cpus))] if cpus else []),
            "--gc-stats-file",
            *(extra_args or []),
        ]
        self.log_path = os.path.join(log_dir, f"{target.key}-{self.port}.log")
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=HERE
        )
        self.pid = self.proc.pid

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.target.key} exited; see {self.log_path}:\n{self.tail()}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                conn.request("GET", "/health")
                if conn.getresponse().status == 200:
                    conn.close()
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"{self.target.key} did not become healthy; see {self.log_path}")

    def tail(self, n: int = 15) -> str:
        with open(self.log_path) as fh:
            return "".join(fh.readlines()[-n:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        with contextlib.suppress(OSError):
            os.remove(f"/tmp/bench-gc-{self.pid}.json")


# ---------------------------------------------------------------------------------------------
# Running a target and reporting
# ---------------------------------------------------------------------------------------------


@dataclass
class Endpoint:
    """A server under test: where it listens, its pid (if local) and the action it steps."""

    key: str
    label: str
    url: str
    pid: int | None
    action: dict[str, Any]


def _better(new: dict[str, Any], old: dict[str, Any] | None) -> bool:
    if old is None or not old.get("ok"):
        return True
    return bool(new.get("ok")) and new["steps_per_s"] > old["steps_per_s"]


def _better_open(new: dict[str, Any], old: dict[str, Any] | None) -> bool:
    if old is None or not old.get("ok"):
        return True
    return bool(new.get("ok")) and new["p99_us"] < old["p99_us"]


def run_load_phases(
    bench: Bench,
    endpoints: list[Endpoint],
    phases: set[str],
    repeat: int,
    results: dict[str, dict[str, Any]],
    progress: Any,
) -> None:
    """Throughput/latency measurements, interleaved across servers and repeated.

    Each measurement runs against every server back to back (so background load on a shared
    machine hits them alike) and the best of `repeat` runs is kept; every run's steps/s is
    recorded under `runs`.
    """
    plan: list[tuple[str, int]] = []
    if "seq" in phases:
        plan += [("ws", 1), ("http", 1)]
    if "conc" in phases:
        plan += [("ws", n) for n in CONCURRENCY_LEVELS if n > 1]
    if "open" in phases:
        plan += [("open", n) for n in CONCURRENCY_LEVELS]
    if not plan:
        return
    overall = progress.add_task("load measurements", total=repeat * len(plan) * len(endpoints))
    for rep in range(repeat):
        for kind, n in plan:
            for ep in endpoints:
                res = results.setdefault(ep.key, {})
                if "failure" in res:
                    progress.advance(overall)
                    continue
                name = (
                    "HTTP sequential"
                    if kind == "http"
                    else f"WS x{n} open loop"
                    if kind == "open"
                    else ("WS sequential" if n == 1 else f"WS x{n}")
                )
                tid = progress.add_task(f"{ep.label}: {name} (run {rep + 1})", total=1.0)

                def tick(fraction: float, what: str, tid: Any = tid) -> None:
                    progress.update(tid, completed=fraction)

                try:
                    if kind == "http":
                        r = measure_http(bench, ep.url, ep.action, ep.pid, tick)
                        slot, container = "http_seq", res
                    elif kind == "open":
                        r = measure_ws(bench, ep.url, ep.action, n, ep.pid, tick, rate=bench.rate)
                        slot, container = str(n), res.setdefault("ws_open", {})
                    else:
                        r = measure_ws(bench, ep.url, ep.action, n, ep.pid, tick)
                        if n == 1:
                            slot, container = "ws_seq", res
                        else:
                            slot, container = str(n), res.setdefault("ws_conc", {})
                except Exception as exc:
                    r = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
                    if kind == "open":
                        slot, container = str(n), res.setdefault("ws_open", {})
                    else:
                        slot = "http_seq" if kind == "http" else ("ws_seq" if n == 1 else str(n))
                        container = (
                            res if kind == "http" or n == 1 else res.setdefault("ws_conc", {})
                        )
                runs = (container.get(slot) or {}).get("runs", [])
                if r.get("ok"):
                    runs = [*runs, round(r["steps_per_s"])]
                if kind == "open":
                    # The rate is fixed: the best run is the one with the lowest p99.
                    p99s = [*(container.get(slot) or {}).get("p99_runs", []), r.get("p99_us")]
                    if _better_open(r, container.get(slot)):
                        container[slot] = r
                    container[slot]["runs"] = runs
                    container[slot]["p99_runs"] = p99s
                elif _better(r, container.get(slot)):
                    container[slot] = r
                container[slot]["runs"] = runs
                progress.remove_task(tid)
                progress.advance(overall)
    for res in results.values():
        if "ws_seq" in res:
            res.setdefault("ws_conc", {})["1"] = res["ws_seq"]


def run_idle_phase(
    bench: Bench,
    ep: Endpoint,
    results: dict[str, dict[str, Any]],
    progress: Any,
) -> None:
    tid = progress.add_task(f"{ep.label}: idle sessions", total=1.0)

    def tick(fraction: float, what: str) -> None:
        progress.update(tid, completed=fraction, description=f"{ep.label}: idle, {what}")

    try:
        results.setdefault(ep.key, {})["idle"] = measure_idle(
            bench, ep.url, ep.action, ep.pid, tick
        )
    except Exception as exc:
        results.setdefault(ep.key, {})["idle"] = {
            "ok": False,
            "error": f"{type(exc).__name__}: {exc}",
        }
    progress.remove_task(tid)


def _fmt(value: Any, spec: str = ",.0f") -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    return format(value, spec)


def _load_cells(r: dict[str, Any] | None) -> list[str]:
    if not r:
        return ["-"] * 8
    if not r.get("ok"):
        text = "n/a" if r.get("na") else "error"
        return [text, "", "", "", "", "", "", (r.get("error") or "")[:60]]
    runs = r.get("runs") or []
    notes = []
    if r.get("errors"):
        notes.append(f"{r['errors']} errors: {(r.get('error_samples') or [''])[0][:60]}")
    if r.get("target_rate"):
        # Open loop: steps/s should equal the target; less means the server fell behind.
        p99s = [x for x in r.get("p99_runs") or [] if x is not None]
        notes.append(f"target {r['target_rate']:,.0f}/s")
        if len(p99s) > 1:
            notes.append("p99 runs " + " / ".join(f"{x / 1000:,.1f} ms" for x in p99s))
    elif len(runs) > 1:
        notes.append("runs " + " / ".join(f"{x:,}" for x in runs))
    if r.get("server_switches_per_step") is not None:
        notes.append(f"{r['server_switches_per_step']:.2f} server context switches per step")
    return [
        _fmt(r["steps_per_s"]),
        _fmt(r["p50_us"]),
        _fmt(r["p99_us"]),
        _fmt(r.get("server_cpu_us_per_step"), ",.1f"),
        _fmt(r.get("server_cpu_pct")),
        _fmt(r.get("client_cpu_pct")),
        _gc_cell(r.get("gc")),
        "; ".join(notes),
    ]


def _gc_cell(gc_stats: dict[str, Any] | None) -> str:
    """Full (gen2) collections during the run: how many, their total and longest pause; then
    the milliseconds of every generation's collections (young ones can cost more in all)."""
    if not gc_stats:
        return "-"
    full = gc_stats["2"]
    every = sum(stats["ms"] for stats in gc_stats.values())
    return f"{full['count']} / {full['ms']:,.0f} / {full['max_ms']:,.0f}; all {every:,.0f} ms"


LOAD_COLUMNS = (
    "steps/s",
    "p50 µs",
    "p99 µs",
    "srv CPU µs/step",
    "srv CPU %",
    "client CPU %",
    "full GCs n / ms / max ms; all gens ms",
    "notes",
)


def render(console: Any, results: dict[str, dict[str, Any]], labels: dict[str, str]) -> None:
    from rich.table import Table

    table = Table(
        title="Steps over one session, and over many WebSocket sessions at once",
        title_justify="left",
    )
    table.add_column("server")
    table.add_column("transport")
    for col in LOAD_COLUMNS:
        table.add_column(col, justify="left" if col == "notes" else "right")
    for key, res in results.items():
        if "failure" in res:
            table.add_row(labels[key], "-", "failed", *[""] * 6, res["failure"][:60])
        rows = []
        if "ws_seq" in res:
            rows.append(("WS, 1 session", res["ws_seq"]))
        if "http_seq" in res:
            rows.append(("HTTP session", res["http_seq"]))
        for n in CONCURRENCY_LEVELS:
            r = res.get("ws_conc", {}).get(str(n))
            if n > 1 and r:
                rows.append((f"WS, {n} sessions", r))
        for n in CONCURRENCY_LEVELS:
            r = res.get("ws_open", {}).get(str(n))
            if r:
                rows.append((f"WS, {n} sessions, open loop", r))
        for i, (name, r) in enumerate(rows):
            table.add_row(
                labels[key] if i == 0 else "", name, *_load_cells(r), end_section=i == len(rows) - 1
            )
    if table.row_count:
        console.print(table)

    table = Table(
        title="Idle WebSocket sessions (connect + reset) held by one server process",
        title_justify="left",
    )
    for col in (
        "server",
        "held / target",
        "answering",
        "opened/s",
        "RSS before MB",
        "RSS after MB",
        "RSS/session KB",
        "threads",
        "first error",
    ):
        table.add_column(col, justify="left" if col in ("server", "first error") else "right")
    for key, res in results.items():
        r = res.get("idle")
        if not r:
            continue
        if not r.get("ok"):
            table.add_row(labels[key], "error", *[""] * 6, (r.get("error") or "")[:70])
            continue
        table.add_row(
            labels[key],
            f"{r['held']:,} / {r['target']:,}",
            _fmt(r["alive"]),
            _fmt(r["sessions_per_s"]),
            _fmt(r["rss_before_kb"] / 1024, ",.1f") if "rss_before_kb" in r else "-",
            _fmt(r["rss_after_kb"] / 1024, ",.1f") if "rss_after_kb" in r else "-",
            _fmt(r.get("rss_per_session_kb"), ",.1f"),
            f"{r.get('threads_before', '-')} → {r.get('threads_after', '-')}",
            (r.get("error") or "")[:70],
        )
    if table.row_count:
        console.print(table)


def _get(results: dict[str, Any], key: str, *path: str) -> float | None:
    node: Any = results.get(key)
    for p in path:
        if not isinstance(node, dict):
            return None
        node = node.get(p)
    if isinstance(node, (int, float)):
        return float(node)
    return None


def targets_report(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Ratios and the project's targets (only those whose inputs were measured)."""
    rows: list[dict[str, Any]] = []

    def ratio(
        name: str, a: float | None, b: float | None, goal: str, check: Callable[[float], bool]
    ) -> None:
        if a is None or b is None or not b:
            return
        value = a / b
        rows.append({"name": name, "value": value, "goal": goal, "pass": check(value)})

    ratio(
        "MCP step, sequential WS: ours / OpenEnv steps/s",
        _get(results, "ours-echo", "ws_seq", "steps_per_s"),
        _get(results, "openenv-echo", "ws_seq", "steps_per_s"),
        "≥ 3x",
        lambda v: v >= 3,
    )
    ratio(
        "MCP step, 64 WS sessions: ours / OpenEnv steps/s",
        _get(results, "ours-echo", "ws_conc", "64", "steps_per_s"),
        _get(results, "openenv-echo", "ws_conc", "64", "steps_per_s"),
        "≥ 3x",
        lambda v: v >= 3,
    )
    ratio(
        "plain step, sequential WS: ours / OpenEnv steps/s",
        _get(results, "ours-plain", "ws_seq", "steps_per_s"),
        _get(results, "openenv-plain", "ws_seq", "steps_per_s"),
        "≥ 2x",
        lambda v: v >= 2,
    )
    ratio(
        "plain step, 64 WS sessions: ours / OpenEnv steps/s",
        _get(results, "ours-plain", "ws_conc", "64", "steps_per_s"),
        _get(results, "openenv-plain", "ws_conc", "64", "steps_per_s"),
        "≥ 2x",
        lambda v: v >= 2,
    )
    ratio(
        "plain step p50 (sequential WS): ours / floor",
        _get(results, "ours-plain", "ws_seq", "p50_us"),
        _get(results, "floor", "ws_seq", "p50_us"),
        "≤ 1.5x",
        lambda v: v <= 1.5,
    )
    variants = (
        ("ours-plain-onloop", "openenv-plain", "plain", 2.0, "opt-in"),
        ("ours-echo-direct", "openenv-echo", "MCP", 3.0, "what-if"),
    )
    for key, other, kind, goal, note in variants:
        for where, path in (("sequential WS", ("ws_seq",)), ("64 WS sessions", ("ws_conc", "64"))):
            ratio(
                f"{kind} step, {where}: {key} / OpenEnv steps/s ({note})",
                _get(results, key, *path, "steps_per_s"),
                _get(results, other, *path, "steps_per_s"),
                f"≥ {goal:g}x",
                lambda v, goal=goal: v >= goal,
            )
    ratio(
        "plain step p50 (sequential WS): ours-plain-onloop / floor (opt-in)",
        _get(results, "ours-plain-onloop", "ws_seq", "p50_us"),
        _get(results, "floor", "ws_seq", "p50_us"),
        "≤ 1.5x",
        lambda v: v <= 1.5,
    )
    for key in ("ours-echo", "ours-plain", "ours-plain-onloop", "openenv-echo", "openenv-plain"):
        ratio(
            f"server CPU per MCP/plain step at 64 sessions: {key} / floor",
            _get(results, key, "ws_conc", "64", "server_cpu_us_per_step"),
            _get(results, "floor", "ws_conc", "64", "server_cpu_us_per_step"),
            "(info)",
            lambda v: True,
        )
    for impl, other in (("echo", "MCP"), ("plain", "plain")):
        ratio(
            f"idle RSS per session, {other} env: ours / OpenEnv",
            _get(results, f"ours-{impl}", "idle", "rss_per_session_kb"),
            _get(results, f"openenv-{impl}", "idle", "rss_per_session_kb"),
            "(info)",
            lambda v: True,
        )
    for key in ("ours-echo", "ours-plain", "ours-plain-onloop", "ours-echo-shared"):
        idle = results.get(key, {}).get("idle")
        if idle and "rss_per_session_kb" in idle:
            ok = idle["alive"] >= 10000 and idle["rss_per_session_kb"] < 100
            rows.append(
                {
                    "name": f"{key}: idle WS sessions held / RSS per session",
                    "value": f"{idle['alive']:,} alive, {idle['rss_per_session_kb']:.1f} KB",
                    "goal": "10,000 at < 100 KB",
                    "pass": ok,
                }
            )
    return rows


def render_targets(console: Any, rows: list[dict[str, Any]]) -> None:
    from rich.table import Table

    if not rows:
        return
    table = Table(title="Ratios and targets", title_justify="left")
    for col in ("figure", "value", "target", "result"):
        table.add_column(col, justify="left" if col == "figure" else "right")
    for row in rows:
        value = row["value"]
        shown = f"{value:.2f}x" if isinstance(value, float) else str(value)
        verdict = (
            ""
            if row["goal"] == "(info)"
            else ("[green]PASS[/green]" if row["pass"] else "[red]FAIL[/red]")
        )
        table.add_row(row["name"], shown, row["goal"], verdict)
    console.print(table)


# ---------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--url", help="server to measure, e.g. http://127.0.0.1:8000 (loopback only)")
    p.add_argument(
        "--action",
        default="mcp",
        help="'mcp' (echo_message tool call), 'plain' ({\"value\": 1}) or a JSON action",
    )
    p.add_argument(
        "--server-pid", type=int, help="pid of the --url server (local) for CPU and RSS figures"
    )
    p.add_argument("--label", default="server", help="name of the --url server in the tables")
    p.add_argument(
        "--compare",
        action="store_true",
        help="start ours, OpenEnv's and the floor servers and compare them",
    )
    p.add_argument(
        "--only",
        default=",".join(DEFAULT_TARGETS),
        help=f"--compare targets, comma-separated (default: {','.join(DEFAULT_TARGETS)}; "
        f"what-if variants: {','.join(k for k in TARGETS if k not in DEFAULT_TARGETS)})",
    )
    p.add_argument(
        "--phases",
        default="seq,conc,idle",
        help="measurements to run: seq, conc, idle (default all), and open (open loop: "
        "--rate steps/s in all, spread over the --levels sessions)",
    )
    p.add_argument(
        "--openenv-python",
        default=None,
        help="interpreter of the venv with the published openenv (default: the compat tests' "
        "venv, built on first use)",
    )
    p.add_argument("--our-python", default=OUR_PYTHON, help="interpreter of our venv")
    p.add_argument("--duration", type=float, default=5.0, help="seconds per measurement")
    p.add_argument(
        "--repeat", type=int, default=2, help="runs of each load measurement; the best is reported"
    )
    p.add_argument(
        "--levels",
        default=",".join(map(str, CONCURRENCY_LEVELS)),
        help="sessions stepping at once in the concurrent phase, comma-separated "
        "(e.g. 1,8,64,256,1024)",
    )
    p.add_argument(
        "--rate",
        type=float,
        default=1000.0,
        help="open-loop phase: steps/s of all sessions together, below the server's capacity "
        "(each of N sessions steps every N/rate seconds, as an agent that thinks between steps)",
    )
    p.add_argument("--idle-sessions", type=int, default=10000, help="idle sessions to open")
    p.add_argument(
        "--idle-timeout",
        type=float,
        default=300.0,
        help="seconds allowed to open the idle sessions",
    )
    p.add_argument(
        "--client",
        choices=sorted(CLIENTS),
        default="fast",
        help="WebSocket client: 'fast' (frame-level, cheap) or 'websockets' (library)",
    )
    p.add_argument(
        "--client-procs", type=int, default=2, help="client processes for concurrent and idle runs"
    )
    p.add_argument(
        "--no-pin",
        action="store_true",
        help="do not pin the server to CPU 0 and the clients to the other CPUs",
    )
    p.add_argument("--log-level", default="warning", help="uvicorn log level of started servers")
    p.add_argument(
        "--serve-args",
        default="",
        help="extra bench/_serve.py options for every started server, for what-if runs; "
        "write it with '=': --serve-args=--gc-freeze or "
        "--serve-args='--gc-freeze --gc-threshold 50000,50,1000'",
    )
    p.add_argument(
        "--openenv-uvicorn",
        choices=("ours", "as-shipped"),
        default="ours",
        help="uvicorn options of OpenEnv's servers: 'ours' (our runner's, the same for every "
        "server) or 'as-shipped' (uvicorn's defaults with what the published package installs: "
        "no uvloop or httptools)",
    )
    p.add_argument("--json", dest="json_out", help="also write the results to this JSON file")
    args = p.parse_args(argv)
    if not args.compare and not args.url:
        p.error("give --url or --compare")
    return args


def make_progress(console: Any) -> Any:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
        console=console,
    )


def collect(
    args: argparse.Namespace, console: Any, progress: Any = None
) -> tuple[dict[str, dict[str, Any]], dict[str, str], dict[str, Any]]:
    """Run the measurements `args` asks for: (results, labels, meta). `bench/perf_report.py`
    calls it with its own progress display."""
    global CONCURRENCY_LEVELS
    CONCURRENCY_LEVELS = tuple(sorted({int(n) for n in args.levels.split(",") if n}))
    nofile = raise_nofile()
    cpus = sorted(os.sched_getaffinity(0))
    pin = not args.no_pin and len(cpus) >= 2
    server_cpus = [cpus[0]] if pin else []
    client_cpus = cpus[1:] if pin else []
    bench = Bench(
        duration=args.duration,
        client=args.client,
        client_procs=args.client_procs,
        client_cpus=client_cpus,
        idle_sessions=args.idle_sessions,
        idle_timeout=args.idle_timeout,
        idle_procs=args.client_procs,
        rate=args.rate,
    )
    phases = {p.strip() for p in args.phases.split(",") if p.strip()}
    if nofile < args.idle_sessions // max(1, args.client_procs) + 100:
        console.print(f"[yellow]open-file limit {nofile} is low for {args.idle_sessions} sessions")

    results: dict[str, dict[str, Any]] = {}
    labels: dict[str, str] = {}
    meta: dict[str, Any] = {
        "cpus": len(cpus),
        "pinning": (
            (
                f"server on CPU {server_cpus}, clients on CPUs {client_cpus}"
                if args.compare
                else f"clients on CPUs {client_cpus} (the --url server is not pinned by the bench)"
            )
            if pin
            else "off"
        ),
        "client": args.client,
        "client_procs": args.client_procs,
        "duration_s": args.duration,
        "repeat": args.repeat,
        "nofile": nofile,
        "loadavg_start": os.getloadavg(),
        "revision": git_revision(),
    }
    progress = progress or make_progress(console)

    if args.compare:
        keys = [k.strip() for k in args.only.split(",") if k.strip()]
        unknown = [k for k in keys if k not in TARGETS]
        if unknown:
            raise ValueError(f"unknown targets {unknown}; choose from {list(TARGETS)}")
        pythons = {
            "ours": args.our_python,
            "floor": args.our_python,
            "openenv": args.openenv_python,
        }
        if any(TARGETS[k].impl == "openenv" for k in keys) and not args.openenv_python:
            pythons["openenv"] = args.openenv_python = published_openenv_python()
        used = sorted({pythons[TARGETS[k].impl] for k in keys})
        options, notes = uvicorn_settings(used, args.log_level)
        meta["uvicorn"] = options
        meta["notes"] = notes
        shown = {
            k: options[k] for k in ("loop", "http", "ws", "ws_per_message_deflate", "log_level")
        }
        console.print(f"uvicorn options for every server (one worker each): {shown}")
        openenv_options = options
        if args.openenv_uvicorn == "as-shipped":
            openenv_options = dict(AS_SHIPPED_UVICORN, log_level=args.log_level)
            meta["openenv_uvicorn"] = openenv_options
            console.print(f"[yellow]except OpenEnv's servers, as shipped: {openenv_options}")
        for note in notes:
            console.print(f"[yellow]{note}")
        console.print(
            f"repository at {meta['revision']}; pinning: {meta['pinning']}; client: {args.client}, "
            f"{args.client_procs} processes; {args.duration:g}s per run, best of "
            f"{args.repeat}; load average {meta['loadavg_start'][0]:.1f}"
        )
        log_dir = tempfile.mkdtemp(prefix="openenv-bench-")
        max_envs = max(args.idle_sessions + 1024, 2048)
        for key in keys:
            labels[key] = TARGETS[key].label

        serve_args = shlex.split(args.serve_args)
        meta["serve_args"] = serve_args
        if serve_args:
            console.print(f"[yellow]what-if run: every server started with {serve_args}")

        def start(key: str) -> Server:
            target = TARGETS[key]
            served = openenv_options if target.impl == "openenv" else options
            return Server(
                target, pythons[target.impl], served, server_cpus, max_envs, log_dir, serve_args
            )

        with progress:
            if phases & {"seq", "conc", "open"}:
                servers: dict[str, Server] = {}
                try:
                    for key in keys:
                        servers[key] = start(key)
                    endpoints = []
                    for key, server in servers.items():
                        try:
                            server.wait_ready()
                        except Exception as exc:
                            console.print(f"[red]{key}: {exc}")
                            results.setdefault(key, {})["failure"] = str(exc)
                            continue
                        endpoints.append(
                            Endpoint(
                                key,
                                labels[key],
                                server.url,
                                server.pid,
                                ACTIONS[TARGETS[key].action],
                            )
                        )
                    run_load_phases(bench, endpoints, phases, args.repeat, results, progress)
                    for key, server in servers.items():
                        if server.proc.poll() is not None:
                            results.setdefault(key, {})["failure"] = (
                                f"server exited: {server.tail()}"
                            )
                finally:
                    for server in servers.values():
                        server.stop()
            if "idle" in phases:
                for key in keys:
                    server = start(key)  # fresh process: the RSS delta is the sessions' own
                    try:
                        server.wait_ready()
                        ep = Endpoint(
                            key, labels[key], server.url, server.pid, ACTIONS[TARGETS[key].action]
                        )
                        run_idle_phase(bench, ep, results, progress)
                    except Exception as exc:
                        console.print(f"[red]{key}: {exc}")
                        results.setdefault(key, {})["idle"] = {"ok": False, "error": str(exc)}
                    finally:
                        server.stop()
        meta["server_logs"] = log_dir
    else:
        host, _ = host_port(args.url)
        if host not in ("127.0.0.1", "localhost", "::1"):
            console.print(f"[yellow]note: {host} is not a loopback address")
        action = ACTIONS.get(args.action)
        if action is None:
            action = json.loads(args.action)
        labels["url"] = args.label
        ep = Endpoint("url", args.label, args.url, args.server_pid, action)
        with progress:
            run_load_phases(bench, [ep], phases, args.repeat, results, progress)
            if "idle" in phases:
                run_idle_phase(bench, ep, results, progress)

    meta["loadavg_end"] = os.getloadavg()
    return results, labels, meta


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    args = parse_args(argv)
    console = Console()
    if not console.is_terminal:
        console = Console(width=170)
    try:
        results, labels, meta = collect(args, console)
    except ValueError as exc:
        console.print(f"[red]{exc}")
        return 2
    cpus = sorted(os.sched_getaffinity(0))
    console.print()
    render(console, results, labels)
    rows = targets_report(results)
    render_targets(console, rows)
    console.print(f"[dim]{json.dumps(meta, default=str)}")
    if meta["loadavg_start"][0] > len(cpus) or meta["loadavg_end"][0] > len(cpus):
        console.print(
            f"[yellow]the machine was busy (load average {meta['loadavg_start'][0]:.1f}"
            f" → {meta['loadavg_end'][0]:.1f} on {len(cpus)} CPUs): figures are noisy"
        )
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump(
                {"meta": meta, "labels": labels, "results": results, "targets": rows},
                fh,
                indent=2,
                default=str,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
