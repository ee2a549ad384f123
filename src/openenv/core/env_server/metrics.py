"""Prometheus metrics of a server (`/metrics`), and optional OpenTelemetry spans per call.

On by default (`OPENENV_METRICS=0` turns them off: then neither `prometheus_client` nor
OpenTelemetry is imported and the hot path pays one `is None` test per request). When on, the
hot path only adds
to plain numbers of this process (no lock: every count is taken on the event loop), which costs
a fraction of `prometheus_client`'s own metric objects; `prometheus_client` renders them at
scrape time. Under `--workers N` the worker that answers a scrape asks the others for their
numbers over their Unix sockets (`workers.py`) and reports the sum, so nothing is written to
disk and nothing is left behind.

Label values are fixed small sets (transport, call kind, outcome, error code and category):
never a session id.
"""

from __future__ import annotations

import asyncio
import glob
import logging
import os
from bisect import bisect_left
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from openenv import settings

from ..protocol import dumps, loads, session_log_id

if TYPE_CHECKING:
    from .sessions import Session

logger = logging.getLogger("openenv.server")

#: A worker's own numbers (JSON) rather than the text of all workers: how workers ask each other.
WORKER_SCOPE_HEADER = "X-OpenEnv-Metrics-Scope"

#: Seconds. Steps of simple environments take well under a millisecond server-side; simulators
#: and sandboxed tools take seconds.
LATENCY_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)


def flag_from_env(name: str) -> bool | None:
    """True or False when the variable (a flag of `openenv.settings`) says so; None when it is
    unset (or unreadable)."""
    return settings.BY_NAME[name].get()  # type: ignore[return-value]


@dataclass(frozen=True)
class _Spec:
    name: str
    kind: str  # counter, gauge or histogram
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()
    #: Label values that exist from the start (at 0), so that rates work from the first scrape.
    initial: tuple[tuple[str, ...], ...] = ()


_KINDS = (("reset",), ("step",))
SPECS = (
    _Spec("openenv_sessions_active", "gauge", "Sessions holding an environment", ("transport",)),
    _Spec("openenv_sessions_queued", "gauge", "Connections waiting for a free session slot"),
    _Spec("openenv_sessions_opened", "counter", "Sessions created", ("transport",)),
    _Spec(
        "openenv_sessions_refused",
        "counter",
        "Sessions refused (capacity: no slot in time; draining: shutting down)",
        ("reason",),
        initial=(("capacity",), ("draining",)),
    ),
    _Spec(
        "openenv_sessions_reaped",
        "counter",
        "Sessions ended by the server (idle: session_timeout; resume_grace: a dropped resumable "
        "connection did not come back; call_timeout: a call hung)",
        ("reason",),
        initial=(("idle",), ("resume_grace",), ("call_timeout",)),
    ),
    _Spec(
        "openenv_sessions_resumed",
        "counter",
        "WebSocket connections that attached to an existing session",
        initial=((),),
    ),
    _Spec(
        "openenv_steps",
        "counter",
        "Steps by outcome (ok; done: the episode ended; error: the call raised)",
        ("outcome",),
        initial=(("ok",), ("done",), ("error",)),
    ),
    _Spec(
        "openenv_resets",
        "counter",
        "Resets by outcome (ok, error)",
        ("outcome",),
        initial=(("ok",), ("error",)),
    ),
    _Spec(
        "openenv_errors",
        "counter",
        "Error replies sent, by wire code and category (client, environment, infrastructure)",
        ("code", "category"),
    ),
    _Spec(
        "openenv_request_duration_seconds",
        "histogram",
        "Server time of a WebSocket reset/step, frame received to reply encoded",
        ("kind",),
        LATENCY_BUCKETS,
        _KINDS,
    ),
    _Spec(
        "openenv_env_call_duration_seconds",
        "histogram",
        "Time inside the environment's reset/step (reward scoring included)",
        ("kind",),
        LATENCY_BUCKETS,
        _KINDS,
    ),
    _Spec(
        "openenv_protocol_overhead_seconds",
        "counter",
        "WebSocket reset/step time outside the environment: decode, validation, waiting for "
        "the session's previous call, encode (compare with the env call duration's sum)",
        ("kind",),
        initial=_KINDS,
    ),
    _Spec(
        "openenv_replay_cache_bytes",
        "gauge",
        "Bytes of encoded replies kept for re-sent requests, all sessions",
        initial=((),),
    ),
    _Spec(
        "openenv_workers_reporting",
        "gauge",
        "Server processes whose numbers this scrape adds up",
    ),
)
_SPECS = {spec.name: spec for spec in SPECS}


class _Value:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def dec(self, amount: float = 1.0) -> None:
        self.value -= amount


class _Histogram:
    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # per bucket (not cumulative); the last: +Inf
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(self.bounds, seconds)] += 1
        self.total += seconds


#: {metric name: [[label values, value or [bucket counts, sum]], ...]}: one process's numbers.
Snapshot = dict[str, list[list[Any]]]


class ServerMetrics:
    """This process's numbers. Hot-path methods use children bound once, here."""

    def __init__(self) -> None:
        self._series: dict[str, dict[tuple[str, ...], Any]] = {spec.name: {} for spec in SPECS}
        for spec in SPECS:
            for labels in spec.initial:
                self.child(spec.name, *labels)
        self.sessions_queued = self.child("openenv_sessions_queued")
        self.sessions_resumed = self.child("openenv_sessions_resumed")
        self.replay_bytes = self.child("openenv_replay_cache_bytes")
        self._steps_ok = self.child("openenv_steps", "ok")
        self._steps_done = self.child("openenv_steps", "done")
        self._steps_error = self.child("openenv_steps", "error")
        self._resets_ok = self.child("openenv_resets", "ok")
        self._resets_error = self.child("openenv_resets", "error")
        self._request = {
            k: self.child("openenv_request_duration_seconds", k) for k in ("reset", "step")
        }
        self._env = {
            k: self.child("openenv_env_call_duration_seconds", k) for k in ("reset", "step")
        }
        self._overhead = {
            k: self.child("openenv_protocol_overhead_seconds", k) for k in ("reset", "step")
        }

    def child(self, name: str, *labels: str) -> Any:
        """The series of metric `name` with these label values (made on first use)."""
        series = self._series[name]
        found = series.get(labels)
        if found is None:
            spec = _SPECS[name]
            found = series[labels] = (
                _Histogram(spec.buckets) if spec.kind == "histogram" else _Value()
            )
        return found

    # -- hot path -------------------------------------------------------------------------

    def answered(self, kind: str, done: bool, env_seconds: float | None) -> None:
        """A reset/step returned (`done`: the episode ended) after `env_seconds` in the
        environment."""
        if kind == "step":
            self._steps_done.value += 1 if done else 0
            self._steps_ok.value += 0 if done else 1
        else:
            self._resets_ok.value += 1
        if env_seconds is not None:
            self._env[kind].observe(env_seconds)

    def failed(self, kind: str) -> None:
        (self._steps_error if kind == "step" else self._resets_error).value += 1

    def request(self, kind: str, seconds: float, session: Session) -> None:
        """A WebSocket reset/step answered in `seconds`; the part outside the environment
        (when the environment ran for this request) is the protocol overhead."""
        request = self._request.get(kind)
        if request is None:
            return
        request.observe(seconds)
        env = session.env_seconds
        if env is not None:
            session.env_seconds = None
            self._overhead[kind].value += seconds - env

    # -- everything else ------------------------------------------------------------------

    def error(self, code: str, category: str) -> None:
        self.child("openenv_errors", code, category).value += 1

    def error_frame(self, frame: bytes) -> None:
        """Count an encoded error frame (`{"type": "error", "data": {...}}`)."""
        try:
            data = loads(frame).get("data") or {}
        except (ValueError, AttributeError):
            return
        self.error(str(data.get("code", "")), str(data.get("category", "")))

    def refused(self, reason: str) -> None:
        self.child("openenv_sessions_refused", reason).value += 1

    def reaped(self, reason: str) -> None:
        self.child("openenv_sessions_reaped", reason).value += 1

    def session_opened(self, transport: str) -> None:
        self.child("openenv_sessions_opened", transport).value += 1
        self.child("openenv_sessions_active", transport).value += 1

    def session_closed(self, session: Session) -> None:
        self.child("openenv_sessions_active", session.transport).value -= 1
        if session.replay_size:
            self.replay_bytes.value -= session.replay_size

    # -- exposition -----------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        out: Snapshot = {}
        for name, series in self._series.items():
            rows: list[list[Any]] = []
            for labels, item in series.items():
                if isinstance(item, _Histogram):
                    rows.append([list(labels), [list(item.counts), item.total]])
                else:
                    rows.append([list(labels), item.value])
            out[name] = rows
        out["openenv_workers_reporting"] = [[[], 1]]
        return out

    def snapshot_json(self) -> bytes:
        return dumps(self.snapshot())


def merge(snapshots: list[Snapshot]) -> Snapshot:
    """The sum of several processes' numbers (gauges too: each process holds its own part)."""
    totals: dict[str, dict[tuple[str, ...], Any]] = {}
    for snapshot in snapshots:
        for name, rows in snapshot.items():
            if name not in _SPECS:
                continue
            series = totals.setdefault(name, {})
            for labels, item in rows:
                key = tuple(labels)
                if isinstance(item, list):
                    counts, total = item
                    have = series.get(key)
                    if have is None:
                        series[key] = [list(counts), total]
                    else:
                        have[0] = [a + b for a, b in zip(have[0], counts, strict=True)]
                        have[1] += total
                else:
                    series[key] = series.get(key, 0) + item
    return {name: [[list(k), v] for k, v in series.items()] for name, series in totals.items()}


class _Families:
    """What `prometheus_client.generate_latest` renders: families built from a snapshot."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot

    def collect(self) -> list[Any]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        families: list[Any] = []
        for spec in SPECS:
            rows = self.snapshot.get(spec.name)
            if rows is None:
                continue
            labels = list(spec.labels)
            family: Any
            if spec.kind == "counter":
                family = CounterMetricFamily(spec.name, spec.help, labels=labels)
            elif spec.kind == "gauge":
                family = GaugeMetricFamily(spec.name, spec.help, labels=labels)
            else:
                family = HistogramMetricFamily(spec.name, spec.help, labels=labels)
            for values, item in rows:
                if spec.kind != "histogram":
                    family.add_metric(values, item)
                    continue
                counts, total = item
                buckets, running = [], 0
                for bound, count in zip((*spec.buckets, float("inf")), counts, strict=True):
                    running += count
                    buckets.append((_bound_text(bound), running))
                family.add_metric(values, buckets, total)
            families.append(family)
        return families


def _bound_text(bound: float) -> str:
    from prometheus_client.utils import floatToGoString

    return floatToGoString(bound)


def render(snapshot: Snapshot) -> tuple[bytes, str]:
    """The Prometheus text exposition of `snapshot`, and its content type."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    return generate_latest(_Families(snapshot)), CONTENT_TYPE_LATEST


async def peer_snapshots(directory: str, me: str, authorization: str | None) -> list[Snapshot]:
    """The numbers of the other workers of this server, asked over their Unix sockets (a
    worker that does not answer within 5 s is left out: `openenv_workers_reporting` says so)."""
    import httpx

    headers = {WORKER_SCOPE_HEADER: "worker"}
    if authorization:
        headers["Authorization"] = authorization

    async def ask(path: str) -> Snapshot | None:
        transport = httpx.AsyncHTTPTransport(uds=path)
        try:
            async with httpx.AsyncClient(transport=transport, timeout=5.0) as client:
                reply = await client.get("http://worker/metrics", headers=headers)
                reply.raise_for_status()
                return loads(reply.content)
        except (httpx.HTTPError, ValueError) as exc:
            logger.warning("Worker %s gave no metrics: %s", os.path.basename(path), exc)
            return None

    paths = sorted(glob.glob(os.path.join(glob.escape(directory), "w*.sock")))
    asked = [path for path in paths if os.path.basename(path) != f"{me}.sock"]
    answers = await asyncio.gather(*(ask(path) for path in asked))
    return [answer for answer in answers if answer is not None]


class CallTracer:
    """OpenTelemetry spans per reset and step. The session appears as its log digest
    (`protocol.session_log_id`), never its id: an id is a credential."""

    def __init__(self) -> None:
        from opentelemetry import trace

        self._tracer = trace.get_tracer("openenv.server")

    def span(self, kind: str, session: Session) -> AbstractContextManager[Any]:
        return self._tracer.start_as_current_span(
            f"openenv.{kind}",
            attributes={
                "openenv.session": session_log_id(session.id),
                "openenv.transport": session.transport,
                "openenv.step_count": session.step_count,
            },
        )


def make_tracer(enabled: bool) -> CallTracer | None:
    """A tracer when tracing is on and OpenTelemetry is installed; else None (no-op)."""
    if not enabled:
        return None
    try:
        return CallTracer()
    except ImportError:
        logger.warning(
            "OPENENV_TRACING is on but opentelemetry is not installed "
            "(pip install 'openenv[otel]'); no spans are recorded"
        )
        return None
