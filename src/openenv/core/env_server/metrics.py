"""Prometheus metrics of a server (`/metrics`), and optional OpenTelemetry spans per call.

Off by default: with `OPENENV_METRICS` unset neither `prometheus_client` nor OpenTelemetry is
imported and the hot path pays one `is None` test per request. When on, every number lives in a
`prometheus_client` metric of the server's own registry (several apps in one process do not
collide). Under `--workers N` each worker writes its numbers to memory-mapped files in the
server's private worker directory (prometheus_client's multiprocess mode, set up by
`workers._worker_main`, removed with that directory), so a scrape answered by any worker adds up
all of them.

Label values are fixed small sets (transport, call kind, outcome, error code and category):
never a session id.
"""

from __future__ import annotations

import logging
import os
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

from ..protocol import loads, session_log_id

if TYPE_CHECKING:
    from .sessions import Session

logger = logging.getLogger("openenv.server")

#: prometheus_client's variable: set, metrics go to files there that every worker shares.
MULTIPROC_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"

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
#: Protocol overhead (decode, validation, queueing behind the session's lock, encode).
OVERHEAD_BUCKETS = (0.00002, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.01, 0.1, 1.0)

_TRUE = frozenset({"1", "true", "yes", "on"})


def flag_from_env(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in _TRUE


class ServerMetrics:
    """The server's metrics. Hot-path methods use label children bound once, here."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.multiprocess = bool(os.environ.get(MULTIPROC_DIR_ENV))
        self.registry = CollectorRegistry(auto_describe=True)
        reg = self.registry
        self.sessions_active = Gauge(
            "openenv_sessions_active",
            "Sessions holding an environment",
            ["transport"],
            registry=reg,
            multiprocess_mode="livesum",
        )
        self.sessions_queued = Gauge(
            "openenv_sessions_queued",
            "Connections waiting for a free session slot",
            registry=reg,
            multiprocess_mode="livesum",
        )
        self.sessions_opened = Counter(
            "openenv_sessions_opened", "Sessions created", ["transport"], registry=reg
        )
        self.sessions_refused = Counter(
            "openenv_sessions_refused",
            "Sessions refused (capacity: no slot in time; draining: shutting down)",
            ["reason"],
            registry=reg,
        )
        self.sessions_reaped = Counter(
            "openenv_sessions_reaped",
            "Sessions ended by the server (idle: session_timeout; resume_grace: a dropped "
            "resumable connection did not come back; call_timeout: a call hung)",
            ["reason"],
            registry=reg,
        )
        self.sessions_resumed = Counter(
            "openenv_sessions_resumed",
            "WebSocket connections that attached to an existing session",
            registry=reg,
        )
        self.steps = Counter(
            "openenv_steps",
            "Steps by outcome (ok, done: the episode ended, error: the call raised)",
            ["outcome"],
            registry=reg,
        )
        self.resets = Counter(
            "openenv_resets", "Resets by outcome (ok, error)", ["outcome"], registry=reg
        )
        self.errors = Counter(
            "openenv_errors",
            "Error replies sent, by wire code and category (client, environment, infrastructure)",
            ["code", "category"],
            registry=reg,
        )
        self.request_seconds = Histogram(
            "openenv_request_duration_seconds",
            "Server time of a WebSocket request, frame received to reply encoded",
            ["kind"],
            buckets=LATENCY_BUCKETS,
            registry=reg,
        )
        self.env_seconds = Histogram(
            "openenv_env_call_duration_seconds",
            "Time inside the environment's reset/step (reward scoring included)",
            ["kind"],
            buckets=LATENCY_BUCKETS,
            registry=reg,
        )
        self.overhead_seconds = Histogram(
            "openenv_protocol_overhead_seconds",
            "Request time not spent in the environment: decode, validation, waiting for the "
            "session's previous call, encode",
            ["kind"],
            buckets=OVERHEAD_BUCKETS,
            registry=reg,
        )
        self.replay_bytes = Gauge(
            "openenv_replay_cache_bytes",
            "Bytes of encoded replies kept for re-sent requests, all sessions",
            registry=reg,
            multiprocess_mode="livesum",
        )
        self._steps = {o: self.steps.labels(o) for o in ("ok", "done", "error")}
        self._resets = {o: self.resets.labels(o) for o in ("ok", "error")}
        self._request = {k: self.request_seconds.labels(k) for k in ("reset", "step")}
        self._env = {k: self.env_seconds.labels(k) for k in ("reset", "step")}
        self._overhead = {k: self.overhead_seconds.labels(k) for k in ("reset", "step")}

    # -- hot path -------------------------------------------------------------------------

    def env_call(self, kind: str, seconds: float) -> None:
        self._env[kind].observe(seconds)

    def stepped(self, done: bool) -> None:
        self._steps["done" if done else "ok"].inc()

    def step_failed(self) -> None:
        self._steps["error"].inc()

    def reset_done(self, ok: bool) -> None:
        self._resets["ok" if ok else "error"].inc()

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
            self._overhead[kind].observe(max(0.0, seconds - env))

    # -- everything else ------------------------------------------------------------------

    def error(self, code: str, category: str) -> None:
        self.errors.labels(code, category).inc()

    def error_frame(self, frame: bytes) -> None:
        """Count an encoded error frame (`{"type": "error", "data": {...}}`)."""
        try:
            data = loads(frame).get("data") or {}
        except (ValueError, AttributeError):
            return
        self.error(str(data.get("code", "")), str(data.get("category", "")))

    def session_opened(self, transport: str) -> None:
        self.sessions_opened.labels(transport).inc()
        self.sessions_active.labels(transport).inc()

    def session_closed(self, session: Session) -> None:
        self.sessions_active.labels(session.transport).dec()
        if session.replay_size:
            self.replay_bytes.dec(session.replay_size)

    def render(self) -> tuple[bytes, str]:
        """The text exposition: this registry, or every worker's files in multiprocess mode."""
        from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

        if self.multiprocess:
            from prometheus_client.multiprocess import MultiProcessCollector

            registry = CollectorRegistry()
            MultiProcessCollector(registry)
            return generate_latest(registry), CONTENT_TYPE_LATEST
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


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


NO_SPAN: AbstractContextManager[Any] = nullcontext()
