"""Server settings, from arguments first and environment variables second."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from openenv import settings

from .dispatch import DEFAULT_IDLE_TIMEOUT

#: Sessions allowed at once when the environment supports concurrency and nothing else is said.
DEFAULT_CONCURRENT_SESSIONS = 1024
#: Server-side deadline of an environment call, in seconds, when nothing else is said: long
#: enough for slow simulators and tool calls, finite so that a hung call cannot hold a slot and
#: a worker thread forever.
DEFAULT_CALL_TIMEOUT = 600.0
#: Seconds SIGTERM waits for in-flight calls to reply before the server ends them and exits.
DEFAULT_SHUTDOWN_GRACE = 10.0
#: OpenEnv's switch for its web interface; the same values turn the /web playground on.
WEB_INTERFACE_ENV = settings.WEB_INTERFACE.name


def web_interface_enabled(explicit: bool | None = None) -> bool:
    """`explicit` if given, else `ENABLE_WEB_INTERFACE` (OpenEnv's values: true/1/yes)."""
    if explicit is not None:
        return explicit
    return settings.WEB_INTERFACE.get() is True


@dataclass
class ServerConfig:
    """How a server holds sessions. `None` for a timeout disables it."""

    #: Sessions served at once (WebSocket, HTTP and MCP sessions share this pool).
    max_concurrent_envs: int | None = None
    #: Seconds a session may stay idle before it is closed (reaper). Env: OPENENV_SESSION_TIMEOUT.
    session_timeout: float | None = 900.0
    #: Seconds a dropped resumable WebSocket session is kept for its client to come back.
    resume_grace_s: float = 60.0
    #: Connections allowed to wait for a free slot, and how long each may wait.
    max_queued: int = 1024
    queue_timeout_s: float = 30.0
    #: Largest accepted message (WebSocket frame or HTTP body), in bytes.
    max_message_bytes: int = 8 * 1024 * 1024
    #: Replies kept per resumable session so a re-sent request is answered, not re-applied.
    replay_window: int = 32
    #: Bytes of encoded replies kept per session for re-sent requests (the newest reply is
    #: always kept); an older one dropped for room is answered REPLY_EVICTED, never re-applied.
    #: Env: OPENENV_REPLAY_BYTES.
    replay_bytes: int = 4 * 1024 * 1024
    #: Most sync environment calls running at once (threads start only when needed).
    max_threads: int = 256
    #: Seconds a worker thread may stay idle before it exits, so the pool shrinks after a
    #: burst of blocking calls. Env: OPENENV_THREAD_IDLE_S. 0 or less: threads stay.
    thread_idle_s: float = DEFAULT_IDLE_TIMEOUT
    #: Bearer token required on every route but /health and on WebSocket handshakes.
    #: Env: OPENENV_API_KEY. None: no authentication (bind to loopback, the default).
    api_key: str | None = None
    #: Browser origins allowed to open WebSockets (`*`: any). Env: OPENENV_ALLOWED_ORIGINS.
    allowed_origins: tuple[str, ...] = ()
    #: Serve the interactive API pages (/docs, /redoc). Env: OPENENV_DOCS=0 turns them off.
    docs: bool = True
    #: Server-side deadline (seconds) of every environment call: factory, reset, step, state,
    #: MCP calls, close. Env: OPENENV_CALL_TIMEOUT. A call past it gets a TIMEOUT error and its
    #: session ends. 0 or less: no deadline (a hung call then holds its slot and thread).
    call_timeout: float | None = DEFAULT_CALL_TIMEOUT
    #: Per-kind deadlines; None: `call_timeout`. Env: OPENENV_RESET_TIMEOUT,
    #: OPENENV_STEP_TIMEOUT (also MCP tool calls), OPENENV_STATE_TIMEOUT.
    reset_timeout: float | None = None
    step_timeout: float | None = None
    state_timeout: float | None = None
    #: Seconds SIGTERM waits for in-flight calls to reply. Env: OPENENV_SHUTDOWN_GRACE.
    shutdown_grace_s: float = DEFAULT_SHUTDOWN_GRACE
    #: Invalid WebSocket messages a connection may send per second (bursts up to ten times as
    #: many) before it is closed (1008), so one flooding client cannot starve the others.
    #: 0: no limit.
    #: Env: OPENENV_WS_INVALID_FRAME_LIMIT.
    ws_invalid_frame_limit: int = 100
    #: Bytes per second a WebSocket connection may send, on average (bursts up to twice
    #: max_message_bytes); beyond it its next message is read later. 0: no limit.
    #: Env: OPENENV_WS_BYTES_PER_S.
    ws_bytes_per_s: int = 1024 * 1024
    #: Serve Prometheus metrics at /metrics (docs/metrics.md). Env: OPENENV_METRICS=0 turns
    #: them off.
    metrics: bool = True
    #: Answer /metrics without the API key (for a scraper on a private network).
    #: Env: OPENENV_METRICS_PUBLIC=1.
    metrics_public: bool = False
    #: OpenTelemetry spans per reset and step (needs `openenv[otel]`). Env: OPENENV_TRACING=1.
    tracing: bool = False

    @classmethod
    def from_env(cls, **overrides: Any) -> ServerConfig:
        """Build a config: explicit (non-None) overrides win over environment variables."""
        values: dict[str, Any] = {}
        for name, setting in _FROM_ENV.items():
            value = setting.get()
            if value is not None:
                values[name] = value
        api_key = settings.API_KEY.get()
        if api_key:
            values["api_key"] = api_key
        origins = settings.ALLOWED_ORIGINS.get()
        if origins:
            values["allowed_origins"] = origins
        if settings.DOCS.get() is False:
            values["docs"] = False
        known = {f.name for f in fields(cls)}
        for name, value in overrides.items():
            if name not in known:
                raise TypeError(f"Unknown server option {name!r}")
            if value is not None:
                values[name] = value
        config = cls(**values)
        if config.session_timeout is not None and config.session_timeout <= 0:
            config.session_timeout = None
        if config.shutdown_grace_s < 0:
            config.shutdown_grace_s = 0.0
        if config.max_concurrent_envs is not None and config.max_concurrent_envs < 1:
            raise ValueError("max_concurrent_envs must be at least 1")
        return config

    def timeout_for(self, kind: str) -> float | None:
        """The deadline of a call of `kind` (reset, step, state, or any other: call_timeout);
        None when there is none."""
        value = getattr(self, f"{kind}_timeout", None) if kind in _KINDS else None
        if value is None:
            value = self.call_timeout
        return value if value is not None and value > 0 else None


_KINDS = frozenset({"reset", "step", "state"})

#: The fields an environment variable sets (unset or blank: the field's default).
_FROM_ENV: dict[str, settings.Setting[Any]] = {
    "max_concurrent_envs": settings.MAX_CONCURRENT_ENVS,
    "session_timeout": settings.SESSION_TIMEOUT,
    "resume_grace_s": settings.RESUME_GRACE,
    "max_queued": settings.MAX_QUEUED,
    "queue_timeout_s": settings.QUEUE_TIMEOUT,
    "max_message_bytes": settings.MAX_MESSAGE_BYTES,
    "max_threads": settings.MAX_THREADS,
    "thread_idle_s": settings.THREAD_IDLE_S,
    "replay_bytes": settings.REPLAY_BYTES,
    "call_timeout": settings.CALL_TIMEOUT,
    "reset_timeout": settings.RESET_TIMEOUT,
    "step_timeout": settings.STEP_TIMEOUT,
    "state_timeout": settings.STATE_TIMEOUT,
    "shutdown_grace_s": settings.SHUTDOWN_GRACE,
    "ws_invalid_frame_limit": settings.WS_INVALID_FRAME_LIMIT,
    "ws_bytes_per_s": settings.WS_BYTES_PER_S,
    "metrics": settings.METRICS,
    "metrics_public": settings.METRICS_PUBLIC,
    "tracing": settings.TRACING,
}
