"""Server settings, from arguments first and environment variables second."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any

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
WEB_INTERFACE_ENV = "ENABLE_WEB_INTERFACE"


def web_interface_enabled(explicit: bool | None = None) -> bool:
    """`explicit` if given, else `ENABLE_WEB_INTERFACE` (OpenEnv's values: true/1/yes)."""
    if explicit is not None:
        return explicit
    return os.environ.get(WEB_INTERFACE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def env_number(name: str, kind: type) -> Any | None:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        return kind(raw)
    except ValueError as exc:
        raise ValueError(
            f"Environment variable {name}={raw!r} is not a valid {kind.__name__}"
        ) from exc


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
        env_map = {
            "max_concurrent_envs": ("MAX_CONCURRENT_ENVS", int),
            "session_timeout": ("OPENENV_SESSION_TIMEOUT", float),
            "resume_grace_s": ("OPENENV_RESUME_GRACE", float),
            "max_queued": ("OPENENV_MAX_QUEUED", int),
            "queue_timeout_s": ("OPENENV_QUEUE_TIMEOUT", float),
            "max_message_bytes": ("OPENENV_MAX_MESSAGE_BYTES", int),
            "max_threads": ("OPENENV_MAX_THREADS", int),
            "thread_idle_s": ("OPENENV_THREAD_IDLE_S", float),
            "replay_bytes": ("OPENENV_REPLAY_BYTES", int),
            "call_timeout": ("OPENENV_CALL_TIMEOUT", float),
            "reset_timeout": ("OPENENV_RESET_TIMEOUT", float),
            "step_timeout": ("OPENENV_STEP_TIMEOUT", float),
            "state_timeout": ("OPENENV_STATE_TIMEOUT", float),
            "shutdown_grace_s": ("OPENENV_SHUTDOWN_GRACE", float),
            "ws_invalid_frame_limit": ("OPENENV_WS_INVALID_FRAME_LIMIT", int),
            "ws_bytes_per_s": ("OPENENV_WS_BYTES_PER_S", int),
        }
        for name, (var, kind) in env_map.items():
            value = env_number(var, kind)
            if value is not None:
                values[name] = value
        from .security import allowed_origins_from_env, api_key_from_env

        if api_key_from_env():
            values["api_key"] = api_key_from_env()
        if allowed_origins_from_env():
            values["allowed_origins"] = tuple(allowed_origins_from_env())
        if os.environ.get("OPENENV_DOCS", "").strip().lower() in ("0", "false", "no", "off"):
            values["docs"] = False
        from .metrics import flag_from_env

        for name, var in (
            ("metrics", "OPENENV_METRICS"),
            ("metrics_public", "OPENENV_METRICS_PUBLIC"),
            ("tracing", "OPENENV_TRACING"),
        ):
            flag = flag_from_env(var)
            if flag is not None:
                values[name] = flag
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
