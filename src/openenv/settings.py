"""Every environment variable openenv reads: its name, type, default and meaning, in one table.

Each `Setting` reads `os.environ` when its `get()` is called, never at import, so a value set
before an app is created (or by a test's monkeypatch) is the value used; every call site reads
at the moment it always has (most when an app or server is made, some per process or per call).
A value a setting does not accept raises `SettingError` (a `ValueError`) naming the variable and
what it accepts. Variables openenv sets for its own child processes are in the table too
(`internal`); code that writes one uses the setting's `name`.

`python -m openenv.settings --markdown` prints the table of docs/configuration.md;
`--write` rewrites that table in place (between its `settings:begin`/`settings:end` markers).

A foundation module: it imports nothing else of openenv.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Optional, TypeVar

T = TypeVar("T")

#: Values that turn a flag on or off (case and surrounding spaces ignored).
TRUE_VALUES = ("1", "true", "yes", "on")
FALSE_VALUES = ("0", "false", "no", "off")
#: The prefix of openenv's own variables (a sandboxed fork server inherits them all).
PREFIX = "OPENENV_"


class SettingError(ValueError):
    """An environment variable holds a value its setting does not accept."""

    def __init__(self, name: str, raw: str, accepted: str) -> None:
        super().__init__(f"Environment variable {name}={raw!r} is not valid: expected {accepted}")
        self.name = name
        self.raw = raw
        self.accepted = accepted


class _Invalid(Exception):
    """Raised by a reader for a value it does not accept; `Setting.get` names the variable."""


@dataclass(frozen=True)
class Setting(Generic[T]):
    """One environment variable. `read` turns its raw value (None when unset) into `T`."""

    name: str
    #: The type as documented: int, float, seconds, bytes, flag, choice, text, path, list.
    type: str
    #: The default as documented (what applies when the variable is unset).
    default: str
    #: One line: what it does.
    doc: str
    #: The part of openenv that reads it (the docs table groups by it).
    area: str
    read: Callable[[Optional[str]], T]
    #: What a valid value looks like (for errors and the docs).
    accepted: str = ""
    #: Set by openenv for its own child processes, not by users.
    internal: bool = False

    def raw(self) -> Optional[str]:
        return os.environ.get(self.name)

    def get(self) -> T:
        """The value now (read from the environment at each call)."""
        raw = os.environ.get(self.name)
        try:
            return self.read(raw)
        except _Invalid:
            raise SettingError(self.name, raw or "", self.accepted) from None

    def is_set(self) -> bool:
        """Whether the variable is set to something other than blank."""
        raw = os.environ.get(self.name)
        return raw is not None and raw.strip() != ""


# Readers: each keeps the semantics its call sites have always had.


def _number(kind: type[T]) -> Callable[[Optional[str]], Optional[T]]:
    """Unset or blank: None (the caller's default); else a `kind` (int or float)."""

    def read(raw: Optional[str]) -> Optional[T]:
        if raw is None or raw.strip() == "":
            return None
        try:
            return kind(raw)  # type: ignore[call-arg]
        except ValueError:
            raise _Invalid from None

    return read


def _limit(kind: type, default: float) -> Callable[[Optional[str]], Optional[float]]:
    """Unset: `default`; blank, 0 or less: None (no limit); else a positive `kind`."""

    def read(raw: Optional[str]) -> Optional[float]:
        if raw is None:
            return default
        if raw.strip() == "":
            return None
        try:
            value = kind(raw)
        except ValueError:
            raise _Invalid from None
        return value if value > 0 else None

    return read


def _flag(raw: Optional[str]) -> Optional[bool]:
    """True or False when the variable says so (TRUE_VALUES, FALSE_VALUES); None otherwise
    (unset, blank or unrecognised: the caller's default)."""
    value = (raw or "").strip().lower()
    if value in TRUE_VALUES:
        return True
    if value in FALSE_VALUES:
        return False
    return None


def _on_unless_off(raw: Optional[str]) -> bool:
    """On when unset; off when set to 0, false or blank (exactly), on for anything else."""
    return (raw if raw is not None else "1") not in ("0", "false", "")


def _on_unless_zero(raw: Optional[str]) -> bool:
    """On unless set to exactly 0."""
    return raw != "0"


def _text(raw: Optional[str]) -> Optional[str]:
    """The value; None when unset or empty."""
    return raw or None


def _choice(*values: str) -> Callable[[Optional[str]], Optional[str]]:
    """Unset or empty: None (the caller's default); else one of `values` (case and surrounding
    spaces ignored), lowercased."""

    def read(raw: Optional[str]) -> Optional[str]:
        if not raw:
            return None
        value = raw.strip().lower()
        if value not in values:
            raise _Invalid
        return value

    return read


def _origins(raw: Optional[str]) -> tuple[str, ...]:
    """Comma-separated origins, each without a trailing slash; blanks skipped."""
    return tuple(item.strip().rstrip("/") for item in (raw or "").split(",") if item.strip())


_INT = "an integer"
_FLOAT = "a number"
_SECONDS = "a number of seconds (0 or less, or empty: no limit)"
_FLAG = "1, true, yes, on or 0, false, no, off"

_SERVER = "server"
_CONNECTIONS = "server connections"
_PROCESS = "server process"
_CLIENT = "client"
_SANDBOX = "sandbox"
_PROVIDERS = "providers"
_HARNESS = "harness"
_OTHER = "cli and models"


def _int(name: str, default: str, doc: str, area: str = _SERVER) -> Setting[Optional[int]]:
    return Setting(name, "int", default, doc, area, _number(int), _INT)


def _float(name: str, default: str, doc: str, area: str = _SERVER) -> Setting[Optional[float]]:
    return Setting(name, "seconds", default, doc, area, _number(float), _FLOAT)


def _timeout(name: str, default: float, doc: str) -> Setting[Optional[float]]:
    return Setting(
        name, "seconds", f"{default:g}", doc, _CONNECTIONS, _limit(float, default), _SECONDS
    )


# --- The server: read when an app is created (`create_app`, `ServerConfig.from_env`). ---

MAX_CONCURRENT_ENVS = _int(
    "MAX_CONCURRENT_ENVS",
    "1024 if the environment is concurrency-safe, else 1",
    "Sessions served at once (OpenEnv's name; WebSocket, HTTP and MCP sessions share them).",
)
SESSION_TIMEOUT = _float(
    "OPENENV_SESSION_TIMEOUT", "900", "An idle session is closed after this long; 0 or less: never."
)
RESUME_GRACE = _float(
    "OPENENV_RESUME_GRACE", "60", "A dropped resumable WebSocket session is kept this long."
)
MAX_QUEUED = _int("OPENENV_MAX_QUEUED", "1024", "Connections allowed to wait for a free slot.")
QUEUE_TIMEOUT = _float("OPENENV_QUEUE_TIMEOUT", "30", "Longest wait for a free slot.")
MAX_MESSAGE_BYTES = Setting(
    "OPENENV_MAX_MESSAGE_BYTES",
    "bytes",
    "8 MiB",
    "Largest accepted message (WebSocket frame or HTTP body).",
    _SERVER,
    _number(int),
    _INT,
)
MAX_THREADS = _int("OPENENV_MAX_THREADS", "256", "Sync environment calls running at once.")
THREAD_IDLE_S = _float(
    "OPENENV_THREAD_IDLE_S", "30", "An idle worker thread exits after this long; 0 or less: never."
)
REPLAY_BYTES = Setting(
    "OPENENV_REPLAY_BYTES",
    "bytes",
    "4 MiB",
    "Encoded replies kept per session to answer re-sent requests.",
    _SERVER,
    _number(int),
    _INT,
)
CALL_TIMEOUT = _float(
    "OPENENV_CALL_TIMEOUT",
    "600",
    "Deadline of every environment call (then TIMEOUT, session ends); 0 or less: none.",
)
RESET_TIMEOUT = _float(
    "OPENENV_RESET_TIMEOUT", "the call timeout", "Deadline of reset; 0 or less: none."
)
STEP_TIMEOUT = _float(
    "OPENENV_STEP_TIMEOUT", "the call timeout", "Deadline of step and MCP tool calls."
)
STATE_TIMEOUT = _float("OPENENV_STATE_TIMEOUT", "the call timeout", "Deadline of state.")
SHUTDOWN_GRACE = _float(
    "OPENENV_SHUTDOWN_GRACE", "10", "SIGTERM waits this long for in-flight calls to reply."
)
WS_INVALID_FRAME_LIMIT = _int(
    "OPENENV_WS_INVALID_FRAME_LIMIT",
    "100",
    "Invalid WebSocket messages per second per connection (bursts 10x), then close 1008; "
    "0: no limit.",
)
WS_BYTES_PER_S = Setting(
    "OPENENV_WS_BYTES_PER_S",
    "bytes",
    "1 MiB",
    "WebSocket bytes per second per connection (bursts 2x the largest message); 0: no limit.",
    _SERVER,
    _number(int),
    _INT,
)
API_KEY = Setting(
    "OPENENV_API_KEY",
    "text",
    "none (no authentication)",
    "Bearer token the server requires (all but /health); clients and fleets send it.",
    _SERVER,
    _text,
)
ALLOWED_ORIGINS = Setting(
    "OPENENV_ALLOWED_ORIGINS",
    "list",
    "none",
    "Comma-separated browser origins allowed to open WebSockets (`*`: any).",
    _SERVER,
    _origins,
)
DOCS = Setting(
    "OPENENV_DOCS",
    "flag",
    "on",
    "Serve the API pages /docs and /redoc (0, false, no, off: not).",
    _SERVER,
    _flag,
    _FLAG,
)
METRICS = Setting(
    "OPENENV_METRICS", "flag", "on", "Serve Prometheus metrics at /metrics.", _SERVER, _flag, _FLAG
)
METRICS_PUBLIC = Setting(
    "OPENENV_METRICS_PUBLIC",
    "flag",
    "off",
    "Answer /metrics without the API key.",
    _SERVER,
    _flag,
    _FLAG,
)
TRACING = Setting(
    "OPENENV_TRACING",
    "flag",
    "off",
    "OpenTelemetry spans per reset and step (needs `openenv[otel]`).",
    _SERVER,
    _flag,
    _FLAG,
)
MODE = Setting(
    "OPENENV_MODE",
    "choice",
    "simulation",
    "Server mode: simulation or production (which MCP tools exist).",
    _SERVER,
    _choice("simulation", "production"),
    "simulation or production",
)
WEB_INTERFACE = Setting(
    "ENABLE_WEB_INTERFACE",
    "flag",
    "off",
    "The /web playground (OpenEnv's name; on for 1, true, yes, on).",
    _SERVER,
    _flag,
    _FLAG,
)
SESSION_GC_FREEZE = Setting(
    "OPENENV_SESSION_GC_FREEZE",
    "flag",
    "on",
    "Freeze live sessions' objects out of full GC passes (0, false or empty: off).",
    _SERVER,
    _on_unless_off,
    "anything; 0, false or empty turn it off",
)
SESSION_GC_YOUNG = Setting(
    "OPENENV_SESSION_GC_YOUNG",
    "flag",
    "on",
    "Size the young GC generation by live sessions (0, false or empty: off).",
    _SERVER,
    _on_unless_off,
    "anything; 0, false or empty turn it off",
)

# --- Connections: read when a server starts (`uvicorn_options`). ---

HTTP_HEADER_TIMEOUT = _timeout(
    "OPENENV_HTTP_HEADER_TIMEOUT", 10.0, "A request's headers must be complete within this."
)
HTTP_BODY_TIMEOUT = _timeout(
    "OPENENV_HTTP_BODY_TIMEOUT", 30.0, "A request's body must be complete within this (then 408)."
)
HTTP_IDLE_TIMEOUT = _timeout(
    "OPENENV_HTTP_IDLE_TIMEOUT", 5.0, "An idle kept-alive HTTP connection is closed after this."
)
WS_SEND_TIMEOUT = _timeout(
    "OPENENV_WS_SEND_TIMEOUT", 20.0, "A WebSocket client that leaves a reply unread is dropped."
)
MAX_CONNECTIONS = Setting(
    "OPENENV_MAX_CONNECTIONS",
    "int",
    "4096",
    "Open connections before HTTP requests get 503 (0 or less, or empty: no cap).",
    _CONNECTIONS,
    _limit(int, 4096),
    "an integer (0 or less, or empty: no cap)",
)

# --- The server process. ---

LOG_LEVEL = Setting(
    "OPENENV_LOG_LEVEL",
    "choice",
    "info (warning in a fork server)",
    "uvicorn's log level: critical, error, warning, info, debug or trace.",
    _PROCESS,
    _choice("critical", "error", "warning", "info", "debug", "trace"),
    "critical, error, warning, info, debug or trace",
)
UNIX_SOCKET = Setting(
    "OPENENV_UNIX_SOCKET",
    "path",
    "none (host and port)",
    "Serve on this Unix socket (set by the docker provider for network-less containers).",
    _PROCESS,
    _text,
)
WORKER_ID = Setting(
    "OPENENV_WORKER_ID",
    "text",
    "none",
    "This worker's id (w0, w1, ...) under a multi-worker server.",
    _PROCESS,
    _text,
    internal=True,
)
WORKER_DIR = Setting(
    "OPENENV_WORKER_DIR",
    "path",
    "none",
    "The folder of the workers' sockets under a multi-worker server.",
    _PROCESS,
    _text,
    internal=True,
)

# --- Clients. ---

CLIENT_MODE = Setting(
    "OPENENV_CLIENT_MODE",
    "choice",
    "simulation",
    "Mode of an EnvClient made without `mode=`: simulation or production.",
    _CLIENT,
    _choice("simulation", "production"),
    "simulation or production",
)

# --- Sandboxes and isolation. ---

SANDBOX = Setting(
    "OPENENV_SANDBOX",
    "choice",
    "auto",
    "Sandbox backend: auto (bubblewrap where it works), bubblewrap (bwrap) or process.",
    _SANDBOX,
    _choice("auto", "bubblewrap", "bwrap", "process"),
    "auto, bubblewrap (or bwrap) or process",
)
SANDBOX_ROOT = Setting(
    "OPENENV_SANDBOX_ROOT",
    "path",
    "the system's temporary folder",
    "Where sandbox workspaces are made.",
    _SANDBOX,
    _text,
)
CGROUP_ROOT = Setting(
    "OPENENV_CGROUP_ROOT",
    "path",
    "/sys/fs/cgroup",
    "The cgroup file system (read once, when openenv.isolation.cgroups is imported).",
    _SANDBOX,
    _text,
)
SANDBOX_RUN = Setting(
    "OPENENV_SANDBOX_RUN",
    "text",
    "none",
    "Marks a process-backend command's processes so that strays can be found and killed.",
    _SANDBOX,
    _text,
    internal=True,
)

# --- Providers. ---

STATE_DIR = Setting(
    "OPENENV_STATE_DIR",
    "path",
    "$XDG_STATE_HOME/openenv (~/.local/state/openenv)",
    "Where started environments are recorded (`openenv ps`).",
    _PROVIDERS,
    _text,
)
KUBERNETES_NAMESPACE = Setting(
    "OPENENV_KUBERNETES_NAMESPACE",
    "text",
    "the context's (or pod's) namespace, else default",
    "Namespace of the kubernetes provider when no `namespace` is given.",
    _PROVIDERS,
    _text,
)
ZYGOTE_WARMUP = Setting(
    "OPENENV_ZYGOTE_WARMUP",
    "flag",
    "on",
    "A fork server builds and closes one environment before forking (0: not).",
    _PROVIDERS,
    _on_unless_zero,
    "anything; 0 turns it off",
)

# --- The harness. ---

CLAUDE_CODE = Setting(
    "OPENENV_CLAUDE_CODE",
    "path",
    "`claude` on PATH",
    "The Claude Code executable the claude_code agent runs.",
    _HARNESS,
    _text,
)
LLM_API_KEY = Setting(
    "OPENENV_LLM_API_KEY",
    "text",
    "none",
    "Key the capture server sends to the model endpoint (its --api-key).",
    _HARNESS,
    _text,
)
CAPTURE_ADMIN_KEY = Setting(
    "OPENENV_CAPTURE_ADMIN_KEY",
    "text",
    "none",
    "Guards the capture server's /sessions (its --admin-key); required off loopback.",
    _HARNESS,
    _text,
)
MCP_URL = Setting(
    "OPENENV_MCP_URL",
    "text",
    "none",
    "The harness bridge a sandboxed shell-tool agent calls.",
    _HARNESS,
    _text,
    internal=True,
)
MODEL_API_KEY = Setting(
    "OPENENV_MODEL_API_KEY",
    "text",
    "none",
    "The API key a sandboxed mini-swe-agent sends (its capture session).",
    _HARNESS,
    _text,
    internal=True,
)
CAPTURE_SESSION = Setting(
    "OPENENV_CAPTURE_SESSION",
    "text",
    "none",
    "The capture session an agent sends as its model API key.",
    _HARNESS,
    _text,
    internal=True,
)

# --- The CLI and models. ---

DEBUG = Setting(
    "OPENENV_DEBUG",
    "flag",
    "off",
    "The CLI shows an unexpected error's traceback instead of one line.",
    _OTHER,
    _flag,
    _FLAG,
)
MODEL_CACHE = Setting(
    "OPENENV_MODEL_CACHE",
    "path",
    "$XDG_CACHE_HOME/openenv/models (~/.cache/openenv/models)",
    "Where converted model checkpoints are kept.",
    _OTHER,
    _text,
)

#: Every setting, in the order of the docs table.
SETTINGS: tuple[Setting[object], ...] = tuple(
    value for value in list(globals().values()) if isinstance(value, Setting)
)
BY_NAME: dict[str, Setting[object]] = {setting.name: setting for setting in SETTINGS}


# --- The docs table. ---

#: The doc that holds the complete table, and its markers.
DOC = Path("docs") / "configuration.md"
BEGIN = "<!-- settings:begin (generated by `python -m openenv.settings --write`; do not edit) -->"
END = "<!-- settings:end -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_table(settings: Sequence[Setting[object]] = SETTINGS) -> str:
    """The docs table of `settings`: one row each, in the table's order (grouped by area)."""
    rows = [
        "| Variable | Read by | Type | Default | Meaning |",
        "| --- | --- | --- | --- | --- |",
    ]
    for setting in settings:
        meaning = ("(set by openenv) " if setting.internal else "") + setting.doc
        rows.append(
            f"| `{setting.name}` | {setting.area} | {setting.type} | "
            f"{_cell(setting.default)} | {_cell(meaning)} |"
        )
    return "\n".join(rows) + "\n"


def rewrite(text: str) -> str:
    """`text` (a doc) with the table between its markers replaced by `markdown_table()`."""
    head, begin, rest = text.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise ValueError(f"no {BEGIN!r} ... {END!r} markers")
    return f"{head}{BEGIN}\n{markdown_table()}{END}{tail}"


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--markdown"]:
        sys.stdout.write(markdown_table())
        return 0
    if args[:1] == ["--write"] and len(args) <= 2:
        path = Path(args[1]) if len(args) == 2 else DOC
        path.write_text(rewrite(path.read_text(encoding="utf-8")), encoding="utf-8")
        return 0
    print("usage: python -m openenv.settings --markdown | --write [docs/configuration.md]")
    return 2


if __name__ == "__main__":
    sys.exit(main())
