"""A soak and chaos driver: thousands of sessions over time against one real server, with faults.

Each cycle keeps `concurrency` sessions running for `duration_s`, each of a random kind:

- `clean`: reset, a few steps, `state`, close (raw frames or the real `EnvClient`);
- `client_resume`: the real `EnvClient`; its TCP connection is cut while a step is in flight,
  and the client resumes and re-sends by itself;
- `resume`: raw frames on a resumable session; the connection is cut (no close frame) with a
  step sent and unanswered, or just after an answer; the session is resumed with its token and
  the unanswered step re-sent (or, sometimes, not);
- `abandon`: a session left with a cut connection (resumable or not), a step maybe in flight;
- `malformed`: invalid JSON, unknown types, invalid actions, oversized and binary frames, each
  answered with its typed error while the session stays usable;
- `slow_reader`: many large replies asked for while the client does not read for seconds;
- `stuck_resume`: a client stops reading with replies piled up, then
  resumes from a new connection while the old one is still open, and re-sends its requests;
- `hung`: a step that blocks in the environment until the driver releases it (or a server-side
  deadline answers it with `TIMEOUT`); some clients wait, some leave while it hangs, some cut
  the connection, resume and re-send it while it still hangs (answered once, applied once).

After each cycle every gate is released, the driver waits for the server's `/capacity` to show
no session, then reads the server process's threads, file descriptors and RSS from `/proc`, and
the Python heap (blocks allocated after a full collection) from the app's `HEAP_PATH` when it
serves one (`add_heap_route`). The heap is the leak check; RSS only backs it up loosely,
because the allocator's fragmentation makes RSS after a cycle swing by 30-45% with nothing kept
(measured: 90-163 MB over six identical cycles on a loaded machine).
`SoakReport.problems()` lists what went wrong: a step lost or applied twice on a resumed
session, an unexpected error or missing reply, sessions, threads, descriptors or memory that
did not come back (`SoakLimits`), an unhealthy server at the end.

Raw sessions build their frames with `protocol.encode_request` and read the server's with
`protocol.decode_reply` and `decode_observation`, so they speak the wire exactly as defined there
(a frame that is not one of the protocol is a problem of the server).

The server must serve `tests/apps/soak_env.py` (or any environment with the same contract:
`SoakAction`, `SoakObservation`, `SoakState` below). Loopback only; Linux (`/proc`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import random
import socket
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx

from openenv.core.env_client import EnvClient
from openenv.core.env_server.types import Action, Observation, State
from openenv.core.protocol import (
    RESUME_TOKEN_HEADER,
    SUBPROTOCOL,
    ObservationReply,
    Reply,
    RequestKind,
    WSErrorCode,
    decode_observation,
    decode_reply,
    encode_request,
)

__all__ = [
    "KINDS",
    "CycleResult",
    "ServerSample",
    "SoakAction",
    "SoakClient",
    "SoakConfig",
    "SoakLimits",
    "SoakObservation",
    "SoakReport",
    "SoakState",
    "run_soak",
    "sample_process",
]


#: Tries of a gate release whose connection failed (see `release`).
_RELEASE_ATTEMPTS = 3


class SoakAction(Action):
    """`tag` is recorded in the state when the step is applied."""

    tag: str
    #: Reply padding, in characters (slow readers ask for large replies).
    pad: int = 0
    #: Block on this named gate until a step releases it (a hung call).
    hold: str | None = None
    hold_limit_s: float = 120.0
    #: Open this named gate (before doing anything else).
    release: str | None = None


class SoakObservation(Observation):
    tag: str = ""
    applied: int = 0
    pad: str = ""


class SoakState(State):
    tags: list[str] = []


class SoakClient(EnvClient[SoakAction, SoakObservation, SoakState]):
    """The real client, typed for the soak environment."""


#: Session kinds and their default weights.
KINDS: dict[str, float] = {
    "clean": 0.33,
    "client_resume": 0.12,
    "resume": 0.2,
    "abandon": 0.1,
    "malformed": 0.1,
    "slow_reader": 0.07,
    "hung": 0.05,
    "stuck_resume": 0.03,
}

#: Expected error code per malformed frame.
_MALFORMED = {
    "invalid_json": WSErrorCode.INVALID_JSON.value,
    "binary_garbage": WSErrorCode.INVALID_JSON.value,
    "unknown_type": WSErrorCode.UNKNOWN_TYPE.value,
    "missing_field": WSErrorCode.VALIDATION_ERROR.value,
    "wrong_type": WSErrorCode.VALIDATION_ERROR.value,
    "extra_field": WSErrorCode.VALIDATION_ERROR.value,
    "oversized": WSErrorCode.MESSAGE_TOO_LARGE.value,
}


@dataclass
class SoakConfig:
    concurrency: int = 200
    duration_s: float = 45.0
    cycles: int = 3
    seed: int = 0
    weights: dict[str, float] = field(default_factory=lambda: dict(KINDS))
    #: Steps per session (uniform).
    min_steps: int = 1
    max_steps: int = 10
    #: Pause between steps, up to this many seconds (uniform), so sessions overlap in time.
    think_s: float = 0.2
    #: Hung calls held at once (more are played as clean sessions). Keep it below the server's
    #: worker threads (OPENENV_MAX_THREADS): gates are released by a step on a worker thread.
    max_hung: int = 3
    #: How long a hung call is left blocked before the driver releases it.
    hang_s: tuple[float, float] = (1.0, 8.0)
    #: How long a slow reader stops reading, its requests and each reply's size.
    slow_pause_s: tuple[float, float] = (1.0, 4.0)
    slow_requests: int = 24
    slow_pad: int = 256 * 1024
    #: Bytes of an oversized frame; must exceed the server's OPENENV_MAX_MESSAGE_BYTES.
    oversized_bytes: int = 300 * 1024
    #: A reply that takes longer than this is a hang (generous: a loaded machine is slow).
    reply_timeout_s: float = 60.0
    #: How long sessions may take to end after a cycle (the server's resume grace is added).
    drain_timeout_s: float = 120.0
    #: The server's resume grace (OPENENV_RESUME_GRACE), to know how long abandoned sessions stay.
    resume_grace_s: float = 60.0
    #: The server's reply budget per session (OPENENV_REPLAY_BYTES): a re-sent request whose
    #: reply fell out of it gets REPLY_EVICTED (applied once, outcome lost), any other an answer.
    replay_bytes: int = 4 * 1024 * 1024


@dataclass
class SoakLimits:
    """Bounds checked after each cycle against the first cycle's figures."""

    #: Python heap blocks after a cycle may exceed cycle 1's by this fraction or
    #: `heap_slack_blocks` (a leaked session holds hundreds of blocks; 2,000 sessions a cycle).
    heap_growth: float = 0.10
    heap_slack_blocks: int = 20_000
    #: RSS after a cycle may exceed RSS after cycle 1 by this fraction, or `rss_slack_mb`: a
    #: backstop for leaks outside the Python heap, loose because RSS is noisy (see the module).
    rss_growth: float = 0.75
    rss_slack_mb: float = 16.0
    #: File descriptors and threads above cycle 1's, once every session has ended.
    fd_slack: int = 16
    thread_slack: int = 8
    #: Worker threads the server may keep by design (its pool, OPENENV_MAX_THREADS): the pool
    #: grows to that size under load and shrinks only after its threads idle for 30 s, so a
    #: short first cycle that did not fill it is no baseline. Threads are flagged only above
    #: both cycle 1's count and the baseline plus a full pool (each + `thread_slack`).
    pool_threads: int = 0


@dataclass
class ServerSample:
    rss_mb: float
    fds: int
    threads: int
    sessions: int
    #: Python heap blocks allocated after a full collection (None: the app serves no HEAP_PATH).
    heap_blocks: int | None = None


@dataclass
class CycleResult:
    index: int
    wall_s: float = 0.0
    sessions: Counter[str] = field(default_factory=Counter)
    steps: int = 0
    resumes: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    latencies_ms: list[float] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    sample: ServerSample | None = None
    peak_concurrency: int = 0
    drain_s: float = 0.0

    def latency(self, q: float) -> float:
        data = sorted(self.latencies_ms)
        if not data:
            return 0.0
        return data[min(len(data) - 1, int(q * len(data)))]


@dataclass
class SoakReport:
    config: SoakConfig
    limits: SoakLimits
    baseline: ServerSample
    cycles: list[CycleResult] = field(default_factory=list)
    final_problems: list[str] = field(default_factory=list)

    @property
    def sessions(self) -> int:
        return sum(sum(c.sessions.values()) for c in self.cycles)

    def problems(self) -> list[str]:
        out = [f"cycle {c.index}: {p}" for c in self.cycles for p in c.problems]
        return out + self.final_problems

    def summary(self) -> str:
        """A plain-text table of the figures (bench/soak.py prints a richer one)."""
        lines = [
            f"baseline: rss {self.baseline.rss_mb:.1f} MB, "
            f"heap {self.baseline.heap_blocks} blocks, "
            f"fds {self.baseline.fds}, threads {self.baseline.threads}",
            "cycle  sessions  steps  resumes  p50 ms  p99 ms  rss MB  heap blocks  fds  threads  "
            "errors",
        ]
        for c in self.cycles:
            s = c.sample
            errors = ", ".join(f"{k} {v}" for k, v in sorted(c.errors.items()))
            lines.append(
                f"{c.index:>5}  {sum(c.sessions.values()):>8}  {c.steps:>5}  {c.resumes:>7}  "
                f"{c.latency(0.5):>6.1f}  {c.latency(0.99):>6.1f}  "
                f"{s.rss_mb if s else 0:>6.1f}  {s.heap_blocks if s else 0!s:>11}  "
                f"{s.fds if s else 0:>3}  "
                f"{s.threads if s else 0:>7}  {errors}"
            )
        lines.append(f"problems: {self.problems() or 'none'}")
        return "\n".join(lines)


#: The soak app's route that answers its Python heap size (see `add_heap_route`).
HEAP_PATH = "/soak/heap"


def add_heap_route(app: Any) -> None:
    """Serve `HEAP_PATH` on a soak app: a full collection, then `sys.getallocatedblocks()`.

    For test servers only: it runs a full collection on the event loop."""

    async def heap(_request: Any) -> Any:
        from starlette.responses import JSONResponse

        gc.collect()
        return JSONResponse({"blocks": sys.getallocatedblocks()})

    app.add_route(HEAP_PATH, heap, methods=["GET"])


async def heap_blocks(http: httpx.AsyncClient, url: str) -> int | None:
    """The server's heap blocks from `HEAP_PATH`, or None when it does not serve it."""
    response = await http.get(f"{url}{HEAP_PATH}")
    if response.status_code == 404:
        return None
    response.raise_for_status()
    return int(response.json()["blocks"])


def sample_process(pid: int, sessions: int = -1) -> ServerSample:
    """Threads, open descriptors and RSS of process `pid`, from /proc."""
    proc = Path(f"/proc/{pid}")
    fds = len(list((proc / "fd").iterdir()))
    fields_: dict[str, str] = {}
    for line in (proc / "status").read_text().splitlines():
        name, _, value = line.partition(":")
        fields_[name] = value.strip()
    rss_kb = int(fields_.get("VmRSS", "0 kB").split()[0])
    return ServerSample(
        rss_mb=rss_kb / 1024, fds=fds, threads=int(fields_["Threads"]), sessions=sessions
    )


class _Problem(Exception):
    """Something the server did wrong; the session stops and the cycle reports it."""


def _ws_url(base: str, query: dict[str, str] | None = None) -> str:
    url = base.replace("http://", "ws://", 1).rstrip("/") + "/ws"
    return f"{url}?{urlencode(query)}" if query else url


class _Raw:
    """A raw WebSocket connection speaking frames, for the faults EnvClient never makes."""

    def __init__(self, run: _Cycle, ws: Any) -> None:
        self.run = run
        self.ws = ws

    @classmethod
    async def open(
        cls,
        run: _Cycle,
        *,
        resumable: bool,
        session_id: str | None = None,
        token: str | None = None,
        max_queue: int | None = 16,
        slow: bool = False,
    ) -> _Raw:
        """`slow`: a reader that stops reading soon fills the server's socket buffer (a small
        receive window, and the library stops reading once one frame is buffered)."""
        from websockets.asyncio.client import connect

        query = {"session_id": session_id} if session_id else None
        headers = {RESUME_TOKEN_HEADER: token} if token else None
        extra: dict[str, Any] = {}
        if slow:
            max_queue = 1
            host, _, port = run.url.split("://", 1)[1].partition(":")
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
            sock.setblocking(False)
            try:
                await asyncio.get_running_loop().sock_connect(sock, (host, int(port)))
            except BaseException:
                sock.close()
                raise
            extra["sock"] = sock
        ws = await connect(
            _ws_url(run.url, query),
            subprotocols=[SUBPROTOCOL] if resumable else None,  # type: ignore[list-item]
            additional_headers=headers,
            max_size=None,
            max_queue=max_queue,
            ping_interval=None,
            compression=None,
            open_timeout=run.config.reply_timeout_s,
            close_timeout=2.0,
            proxy=None,
            **extra,
        )
        return cls(run, ws)

    async def send(self, frame: str | bytes) -> None:
        await self.ws.send(frame)

    async def recv(self, what: str) -> Reply:
        try:
            raw = await asyncio.wait_for(self.ws.recv(), self.run.config.reply_timeout_s)
        except asyncio.TimeoutError:
            limit = self.run.config.reply_timeout_s
            raise _Problem(f"no reply to {what} within {limit:g}s") from None
        except Exception as exc:
            raise _Problem(f"connection lost waiting for {what}: {exc!r}") from None
        return self.decode(raw, what)

    def decode(self, raw: str | bytes, what: str) -> Reply:
        """A server frame, read as the protocol defines it (errors are counted)."""
        try:
            reply = decode_reply(raw)
        except ValueError as exc:
            raise _Problem(f"{what}: answered with a frame outside the protocol: {exc}") from None
        if reply.is_error:
            self.run.result.errors[str(reply.data.get("code"))] += 1
        return reply

    async def reply(self, rid: int, what: str) -> Reply:
        """The frame answering request `rid` (frames of other ids are a protocol error)."""
        reply = await self.recv(what)
        if reply.id != rid:
            raise _Problem(f"{what}: expected the reply to id {rid}, got {str(reply)[:200]}")
        return reply

    async def call(self, kind: RequestKind, rid: int, data: Any = None) -> Reply:
        await self.send(encode_request(kind, data, rid))
        return await self.reply(rid, kind)

    def cut(self) -> None:
        """Drop the TCP connection without a close frame."""
        transport = getattr(self.ws, "transport", None)
        if transport is not None:
            transport.abort()

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.ws.close(), 5.0)


def _malformed_frame(fault: str, rid: int, oversized_bytes: int) -> str | bytes:
    """The frame of one kind of fault in `_MALFORMED`: not JSON, or the protocol's envelope
    (`encode_request`) around a type or an action the server must refuse."""
    if fault == "invalid_json":
        frame = encode_request("step", {"tag": "0"}, rid)
        return frame[: len(frame) // 2]  # a frame cut short
    if fault == "binary_garbage":
        return b"\xff\xfe\x00garbage"
    if fault == "unknown_type":
        return encode_request("teleport", None, rid)  # type: ignore[arg-type]
    data: Any = {
        "missing_field": {},
        "wrong_type": {"tag": ["a"]},
        "extra_field": {"tag": "1", "x": 1},
        "oversized": {"tag": "y" * oversized_bytes},
    }[fault]
    return encode_request("step", data, rid)


def _error_code(reply: Reply) -> str | None:
    code = reply.data.get("code") if reply.is_error else None
    return code if isinstance(code, str) else None


def _observation(reply: Reply, what: str) -> ObservationReply:
    """The observation a reply carries (anything else is a problem)."""
    if reply.kind != "observation":
        raise _Problem(f"{what}: expected an observation, got {str(reply)[:300]}")
    try:
        return decode_observation(reply.data)
    except ValueError as exc:
        raise _Problem(f"{what}: {exc}") from None


def _tags(state: Reply) -> Any:
    """The tags of a `state` reply (None when it is not one)."""
    return state.data.get("tags") if state.kind == "state" else None


class _Cycle:
    """One cycle's sessions and their tallies."""

    def __init__(self, url: str, config: SoakConfig, index: int, rng: random.Random) -> None:
        self.url = url
        self.config = config
        self.rng = rng
        self.result = CycleResult(index=index)
        self.hung_now = 0
        self.gates: set[str] = set()
        self.ids = itertools.count(1)
        self.http = httpx.AsyncClient(base_url=url, timeout=config.reply_timeout_s)

    # -- helpers ------------------------------------------------------------------------

    async def think(self) -> None:
        await asyncio.sleep(self.rng.random() * self.config.think_s)

    async def timed_step(self, conn: _Raw, rid: int, action: dict[str, Any]) -> ObservationReply:
        start = time.perf_counter()
        reply = await conn.call("step", rid, action)
        self.result.latencies_ms.append((time.perf_counter() - start) * 1000)
        obs = _observation(reply, f"step {action['tag']}")
        if obs.observation.get("tag") != action["tag"]:
            raise _Problem(f"step {action['tag']} answered with tag {obs.observation}")
        self.result.steps += 1
        return obs

    async def release(self, gate: str) -> None:
        """Open a gate through a stateless HTTP step (a fresh environment, no session)."""
        action = {"tag": "release", "release": gate}
        for attempt in range(_RELEASE_ATTEMPTS):
            try:
                response = await self.http.post("/step", json={"action": action})
            except httpx.TransportError as exc:
                # A pooled keep-alive connection the server closed as it was reused (its idle
                # timeout) fails the request with ReadError; opening a gate twice is harmless.
                if attempt + 1 < _RELEASE_ATTEMPTS:
                    continue
                self.result.problems.append(f"release of a gate failed: {exc!r}")
            except httpx.HTTPError as exc:
                self.result.problems.append(f"release of a gate failed: {exc!r}")
            else:
                if response.status_code != 200:
                    self.result.problems.append(f"release of a gate: HTTP {response.status_code}")
            break
        self.gates.discard(gate)

    @staticmethod
    def check_tags(
        what: str, applied: list[str], acked: list[str], unacked: list[str]
    ) -> list[str]:
        """Every acknowledged step applied once, an unacknowledged one at most once, in order."""
        counts = Counter(applied)
        out = []
        for tag in acked:
            if counts[tag] != 1:
                out.append(f"{what}: acknowledged step {tag} applied {counts[tag]} times")
        for tag in unacked:
            if counts[tag] > 1:
                out.append(f"{what}: unacknowledged step {tag} applied {counts[tag]} times")
        unknown = set(counts) - set(acked) - set(unacked)
        if unknown:
            out.append(f"{what}: steps never sent were applied: {sorted(unknown)}")
        if [int(t) for t in applied] != sorted(int(t) for t in applied):
            out.append(f"{what}: steps applied out of order: {applied}")
        return out

    # -- session kinds ------------------------------------------------------------------

    async def clean(self) -> None:
        steps = self.rng.randint(self.config.min_steps, self.config.max_steps)
        if self.rng.random() < 0.3:
            await self.clean_client(steps)
            return
        conn = await _Raw.open(self, resumable=self.rng.random() < 0.5)
        try:
            if conn.ws.subprotocol:
                await conn.recv("session frame")
            _observation(await conn.call("reset", next(self.ids), {}), "reset")
            sent = []
            for n in range(steps):
                await self.think()
                await self.timed_step(conn, next(self.ids), {"tag": str(n)})
                sent.append(str(n))
            state = await conn.call("state", next(self.ids))
            if _tags(state) != sent:
                raise _Problem(f"clean session: state tags {state.data} != {sent}")
            await conn.send(encode_request("close", request_id=0))
            closed = await conn.recv("close")
            if closed.kind != "closed" or closed.id != 0:
                raise _Problem(f"close answered with {closed}")
        finally:
            await conn.close()

    async def clean_client(self, steps: int, cut_at: int | None = None) -> None:
        client = SoakClient(
            base_url=self.url,
            message_timeout_s=self.config.reply_timeout_s,
            connect_timeout_s=self.config.reply_timeout_s,
            ping_interval_s=None,
            max_reconnect_attempts=8,
        )
        try:
            await client.reset()
            acked = []
            for n in range(steps):
                await self.think()
                start = time.perf_counter()
                task = asyncio.ensure_future(client.step(SoakAction(tag=str(n))))
                if n == cut_at:
                    await asyncio.sleep(self.rng.random() * 0.005)
                    ws = client._ws
                    if ws is not None:
                        ws.transport.abort()
                        self.result.resumes += 1
                result = await task
                self.result.latencies_ms.append((time.perf_counter() - start) * 1000)
                if result.observation.tag != str(n):
                    raise _Problem(f"client step {n} answered with tag {result.observation.tag}")
                self.result.steps += 1
                acked.append(str(n))
            state = await client.state()
            self.result.problems.extend(self.check_tags("client session", state.tags, acked, []))
        except _Problem:
            raise
        except Exception as exc:
            raise _Problem(f"client session failed: {exc!r}") from None
        finally:
            await client.disconnect()

    async def client_resume(self) -> None:
        steps = self.rng.randint(max(2, self.config.min_steps), max(2, self.config.max_steps))
        await self.clean_client(steps, cut_at=self.rng.randrange(steps))

    async def resume(self) -> None:
        cfg = self.config
        steps = self.rng.randint(max(2, cfg.min_steps), max(2, cfg.max_steps))
        conn = await _Raw.open(self, resumable=True)
        try:
            info = (await conn.recv("session frame")).data
            sid, token = info["session_id"], info["resume_token"]
            _observation(await conn.call("reset", next(self.ids), {}), "reset")
            acked: list[str] = []
            unacked: list[str] = []
            cuts = {self.rng.randrange(steps) for _ in range(self.rng.randint(1, 2))}
            for n in range(steps):
                await self.think()
                tag, rid = str(n), next(self.ids)
                action = {"tag": tag}
                if n not in cuts:
                    await self.timed_step(conn, rid, action)
                    acked.append(tag)
                    continue
                in_flight = self.rng.random() < 0.7
                if in_flight:
                    await conn.send(encode_request("step", action, rid))
                    await asyncio.sleep(self.rng.random() * 0.003)
                else:
                    await self.timed_step(conn, rid, action)
                    acked.append(tag)
                conn.cut()
                conn = await self.reattach(sid, token, "resume of a session")
                if in_flight:
                    if self.rng.random() < 0.85:  # re-send: answered once, from the cache
                        await self.timed_step(conn, rid, action)
                        acked.append(tag)
                    else:
                        unacked.append(tag)
            state = await conn.call("state", next(self.ids))
            tags = _tags(state)
            if not isinstance(tags, list):
                raise _Problem(f"resumed session: no state: {str(state)[:300]}")
            self.result.problems.extend(self.check_tags("resumed session", tags, acked, unacked))
            await conn.send(encode_request("close"))
        finally:
            await conn.close()

    async def abandon(self) -> None:
        conn = await _Raw.open(self, resumable=self.rng.random() < 0.5)
        if conn.ws.subprotocol:
            await conn.recv("session frame")
        _observation(await conn.call("reset", next(self.ids), {}), "reset")
        for n in range(self.rng.randint(0, 3)):
            await self.timed_step(conn, next(self.ids), {"tag": str(n)})
        if self.rng.random() < 0.5:
            await conn.send(encode_request("step", {"tag": "99"}, next(self.ids)))
        conn.cut()

    async def malformed(self) -> None:
        cfg = self.config
        conn = await _Raw.open(self, resumable=self.rng.random() < 0.5)
        try:
            if conn.ws.subprotocol:
                await conn.recv("session frame")
            _observation(await conn.call("reset", next(self.ids), {}), "reset")
            faults = self.rng.sample(sorted(_MALFORMED), self.rng.randint(1, 4))
            applied = []
            for n, fault in enumerate(faults):
                rid = next(self.ids)
                await conn.send(_malformed_frame(fault, rid, cfg.oversized_bytes))
                reply = await conn.recv(fault)
                if _error_code(reply) != _MALFORMED[fault]:
                    raise _Problem(f"{fault} frame answered with {str(reply)[:300]}")
                if reply.data.get("category") != "client":
                    raise _Problem(f"{fault} frame blamed on {reply.data.get('category')}")
                # The session stays usable.
                await self.timed_step(conn, next(self.ids), {"tag": str(n)})
                applied.append(str(n))
            state = await conn.call("state", next(self.ids))
            if _tags(state) != applied:
                raise _Problem(f"after malformed frames: tags {state.data} != {applied}")
            await conn.send(encode_request("close"))
        finally:
            await conn.close()

    async def slow_reader(self) -> None:
        cfg = self.config
        conn = await _Raw.open(self, resumable=self.rng.random() < 0.5, slow=True)
        try:
            if conn.ws.subprotocol:
                await conn.recv("session frame")
            _observation(await conn.call("reset", next(self.ids), {}), "reset")
            rids = []
            for n in range(cfg.slow_requests):
                rid = next(self.ids)
                rids.append(rid)
                await conn.send(encode_request("step", {"tag": str(n), "pad": cfg.slow_pad}, rid))
            await asyncio.sleep(self.rng.uniform(*cfg.slow_pause_s))
            for n, rid in enumerate(rids):
                obs = _observation(await conn.reply(rid, "slow step"), "slow step").observation
                if obs.get("tag") != str(n) or len(obs.get("pad", "")) != cfg.slow_pad:
                    raise _Problem(f"slow reader: step {n} answered wrongly")
                self.result.steps += 1
            state = await conn.call("state", next(self.ids))
            expected = [str(n) for n in range(cfg.slow_requests)]
            if _tags(state) != expected:
                raise _Problem("slow reader: state tags differ from the steps sent")
            await conn.send(encode_request("close"))
        finally:
            await conn.close()

    async def reattach(self, session_id: str, token: str, what: str) -> _Raw:
        """Reattach to a session from a new connection; its first frame must say resumed."""
        conn = await _Raw.open(self, resumable=True, session_id=session_id, token=token)
        first = await conn.recv("session frame after resume")
        if first.kind != "session" or not first.data.get("resumed"):
            await conn.close()
            raise _Problem(f"{what} refused: {str(first)[:300]}")
        self.result.resumes += 1
        return conn

    async def stuck_resume(self) -> None:
        """The half-open case: a client stops reading, then resumes from a new connection.

        The old connection stays open with replies piled up unread; the new one must get its
        session frame and the stored replies of every re-sent request, each step applied once.
        """
        cfg = self.config
        old = await _Raw.open(self, resumable=True, slow=True)
        conn: _Raw | None = None
        try:
            info = (await old.recv("session frame")).data
            _observation(await old.call("reset", next(self.ids), {}), "reset")
            sent = []
            for n in range(cfg.slow_requests):
                rid = next(self.ids)
                frame = encode_request("step", {"tag": str(n), "pad": cfg.slow_pad}, rid)
                sent.append((rid, frame))
                await old.send(frame)
            await asyncio.sleep(self.rng.uniform(*cfg.slow_pause_s))
            conn = await self.reattach(
                info["session_id"], info["resume_token"], "resume from a stuck connection"
            )
            # The newest replies that fit in the server's budget are kept; older ones may be
            # dropped for room (never applied again: the tags below prove it).
            kept = max(1, cfg.replay_bytes // (cfg.slow_pad + 1024))
            for n, (rid, frame) in enumerate(sent):
                await conn.send(frame)
                reply = await conn.reply(rid, "re-sent step")
                if n < len(sent) - kept and _error_code(reply) == WSErrorCode.REPLY_EVICTED.value:
                    continue
                obs = _observation(reply, "re-sent step")
                if obs.observation.get("tag") != str(n):
                    raise _Problem(f"stuck resume: step {n} answered wrongly")
                self.result.steps += 1
            state = await conn.call("state", next(self.ids))
            expected = [str(n) for n in range(len(sent))]
            if _tags(state) != expected:
                raise _Problem(f"stuck resume: tags {_tags(state)}")
            await conn.send(encode_request("close"))
        finally:
            old.cut()
            if conn is not None:
                await conn.close()

    async def hung(self) -> None:
        """A step blocked in the environment; the client waits, leaves, or resumes and re-sends.

        Resumed: the connection is cut right after the step is sent, the session resumed and
        the same request re-sent while the step still hangs; it must be answered once.
        """
        cfg = self.config
        gate = f"g{self.result.index}-{next(self.ids)}-{self.rng.random()}"
        self.gates.add(gate)
        conn = await _Raw.open(self, resumable=self.rng.random() < 0.5)
        try:
            info: dict[str, Any] = {}
            if conn.ws.subprotocol:
                info = (await conn.recv("session frame")).data
            _observation(await conn.call("reset", next(self.ids), {}), "reset")
            rid = next(self.ids)
            step = encode_request("step", {"tag": "0", "hold": gate}, rid)
            await conn.send(step)
            resumed = bool(info) and self.rng.random() < 0.4
            if resumed:
                await asyncio.sleep(self.rng.random() * 0.2)
                conn.cut()
                conn = await self.reattach(
                    info["session_id"], info["resume_token"], "resume during a hung step"
                )
                await conn.send(step)  # still running: answered when it ends, applied once
            leave = not resumed and self.rng.random() < 0.5
            try:
                frame = await asyncio.wait_for(conn.ws.recv(), self.rng.uniform(*cfg.hang_s))
            except asyncio.TimeoutError:
                frame = None
            if frame is None and leave:
                conn.cut()  # the client gives up on the hung call and leaves
                await self.release(gate)
                return
            if frame is None:
                await self.release(gate)
                reply = await conn.reply(rid, "hung step")
            else:
                reply = conn.decode(frame, "hung step")
            # A server-side deadline answers TIMEOUT; without one the released step completes.
            code = _error_code(reply)
            timed_out = code == WSErrorCode.TIMEOUT.value
            if reply.id != rid or (reply.kind != "observation" and not timed_out):
                raise _Problem(f"hung step answered with {str(reply)[:300]}")
            if code is None:
                state = await conn.call("state", next(self.ids))
                tags = _tags(state)
                if tags != ["0"]:
                    raise _Problem(f"hung step (resumed: {resumed}) applied as {tags}")
            with contextlib.suppress(Exception):  # a timed-out session may be closed already
                await conn.send(encode_request("close"))
        finally:
            if gate in self.gates:
                await self.release(gate)
            await conn.close()

    # -- the cycle ----------------------------------------------------------------------

    def pick(self) -> tuple[str, Callable[[], Awaitable[None]]]:
        kinds = list(self.config.weights)
        kind = self.rng.choices(kinds, weights=[self.config.weights[k] for k in kinds])[0]
        if kind == "hung":
            if self.hung_now >= self.config.max_hung:
                kind = "clean"
            else:
                self.hung_now += 1  # counted when picked: tasks start later, all at once
        return kind, getattr(self, kind)

    async def session(self, kind: str, play: Callable[[], Awaitable[None]]) -> None:
        self.result.sessions[kind] += 1
        try:
            await play()
        except _Problem as exc:
            self.result.problems.append(f"{kind}: {exc}")
        except Exception as exc:
            self.result.problems.append(f"{kind}: unexpected {exc!r}")
        finally:
            if kind == "hung":
                self.hung_now -= 1

    async def run(self) -> None:
        cfg = self.config
        start = time.monotonic()
        stop = start + cfg.duration_s
        running: set[asyncio.Task[None]] = set()
        while time.monotonic() < stop:
            while len(running) < cfg.concurrency:
                running.add(asyncio.ensure_future(self.session(*self.pick())))
            self.result.peak_concurrency = max(self.result.peak_concurrency, len(running))
            _, running = await asyncio.wait(
                running,
                timeout=max(0.01, stop - time.monotonic()),
                return_when=asyncio.FIRST_COMPLETED,
            )
        if running:
            _, late = await asyncio.wait(running, timeout=cfg.drain_timeout_s)
            for task in late:
                task.cancel()
            if late:
                self.result.problems.append(f"{len(late)} sessions did not finish")
        for gate in list(self.gates):
            await self.release(gate)
        self.result.wall_s = time.monotonic() - start

    async def wait_no_sessions(self) -> int:
        """Wait for /capacity to show no session; the count left when the bound ran out."""
        deadline = time.monotonic() + self.config.drain_timeout_s + self.config.resume_grace_s
        start = time.monotonic()
        active = -1
        while time.monotonic() < deadline:
            response = await self.http.get("/capacity")
            active = int(response.json()["active_sessions"])
            if active == 0:
                break
            await asyncio.sleep(0.25)
        self.result.drain_s = time.monotonic() - start
        if active != 0:
            self.result.problems.append(f"{active} sessions still open after the cycle")
        return active


async def _healthy(url: str, config: SoakConfig) -> list[str]:
    """The server answers /health and plays a fresh clean episode."""
    problems = []
    async with httpx.AsyncClient(base_url=url, timeout=config.reply_timeout_s) as http:
        health = await http.get("/health")
        if health.status_code != 200:
            problems.append(f"/health answered {health.status_code}")
    client = SoakClient(base_url=url, message_timeout_s=config.reply_timeout_s)
    try:
        await client.reset()
        for n in range(3):
            await client.step(SoakAction(tag=str(n)))
        state = await client.state()
        if state.tags != ["0", "1", "2"]:
            problems.append(f"a fresh episode at the end has tags {state.tags}")
    except Exception as exc:
        problems.append(f"a fresh episode at the end failed: {exc!r}")
    finally:
        await client.disconnect()
    return problems


async def run_soak(
    url: str,
    pid: int,
    config: SoakConfig | None = None,
    limits: SoakLimits | None = None,
    on_cycle: Callable[[CycleResult], None] | None = None,
) -> SoakReport:
    """Run `config.cycles` cycles against the server at `url` (process `pid`); see the module."""
    config = config or SoakConfig()
    limits = limits or SoakLimits()
    rng = random.Random(config.seed)
    problems = await _healthy(url, config)
    report = SoakReport(config, limits, await _sample(url, pid, 0), final_problems=problems)
    for index in range(1, config.cycles + 1):
        cycle = _Cycle(url, config, index, rng)
        try:
            await cycle.run()
            active = await cycle.wait_no_sessions()
        finally:
            await cycle.http.aclose()
        await asyncio.sleep(0.5)  # connections closed by the server finish closing
        cycle.result.sample = await _sample(url, pid, active)
        _check_growth(report, cycle.result, limits)
        report.cycles.append(cycle.result)
        if on_cycle is not None:
            on_cycle(cycle.result)
    report.final_problems.extend(await _healthy(url, config))
    return report


async def _sample(url: str, pid: int, sessions: int) -> ServerSample:
    sample = sample_process(pid, sessions)
    async with httpx.AsyncClient(timeout=30.0) as http:
        sample.heap_blocks = await heap_blocks(http, url)
    return sample


def _check_growth(report: SoakReport, cycle: CycleResult, limits: SoakLimits) -> None:
    if not report.cycles or cycle.sample is None:
        return
    first = report.cycles[0].sample
    now = cycle.sample
    assert first is not None
    if first.heap_blocks is not None and now.heap_blocks is not None:
        heap_bound = first.heap_blocks + max(
            int(first.heap_blocks * limits.heap_growth), limits.heap_slack_blocks
        )
        if now.heap_blocks > heap_bound:
            cycle.problems.append(
                f"Python heap {now.heap_blocks} blocks above the bound {heap_bound} (cycle 1: "
                f"{first.heap_blocks})"
            )
    rss_bound = first.rss_mb + max(first.rss_mb * limits.rss_growth, limits.rss_slack_mb)
    if now.rss_mb > rss_bound:
        cycle.problems.append(
            f"RSS {now.rss_mb:.1f} MB above the bound {rss_bound:.1f} MB (cycle 1: "
            f"{first.rss_mb:.1f} MB)"
        )
    if now.fds > first.fds + limits.fd_slack:
        cycle.problems.append(f"{now.fds} file descriptors (cycle 1: {first.fds})")
    full_pool = report.baseline.threads + limits.pool_threads
    if now.threads > max(first.threads, full_pool) + limits.thread_slack:
        cycle.problems.append(
            f"{now.threads} threads (cycle 1: {first.threads}; start {report.baseline.threads} "
            f"+ a full pool of {limits.pool_threads})"
        )
