"""Run an environment app with uvicorn, tuned for many sessions and fast steps.

`serve_main` is the `main()` of every environment server (`python -m pkg.server.app`, the
`server` script, the Docker image's command); `openenv serve` runs apps through `run_server` too.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
from collections.abc import Mapping, Sequence
from typing import Any

from openenv import settings

#: Loopback unless asked: a server on every interface is an explicit choice (`--host 0.0.0.0`,
#: as the Docker image's command makes it).
DEFAULT_HOST = "127.0.0.1"
#: Set by `defer_gc`: the collector is off until the app starts serving.
_gc_deferred = False


def defer_gc() -> None:
    """Turn the garbage collector off until the app starts serving (`freeze_startup_objects`).

    Importing a server creates ~200,000 objects that live as long as the process; with the
    collector on, its passes over them are 10-15% of the import time, for the few hundred
    objects of garbage an import leaves (`python -m openenv.core.env_server.boot`, the command
    of the images `openenv build` makes, calls this first)."""
    global _gc_deferred
    gc.disable()
    _gc_deferred = True


def freeze_startup_objects() -> None:
    """Move everything allocated so far out of the collector's reach, as the app starts.

    Imported modules live as long as the process: left in the collector's generations, every
    full pass walks them and stalls the sessions. No full pass comes first: over an MCP
    server's ~150,000 start-up objects one took 85-140 ms of its start here and reclaimed 20
    objects. With the collector on, a young collection keeps fresh garbage out of the frozen
    set; after `defer_gc` even that would walk every object made since (all of them are young),
    so the collector only goes back on. Cycles frozen with the rest wait for `session_gc`'s
    thaw, as the sessions' do.
    """
    global _gc_deferred
    if _gc_deferred:
        gc.freeze()
        gc.enable()
        _gc_deferred = False
    else:
        gc.collect(1)
        gc.freeze()


def import_app(app: str | Any) -> Any:
    """The app behind an import string ("pkg.server.app:app"), imported with the collector off
    as `boot` does, for a server that imports it in this process (`openenv serve`, the uv
    provider, each worker). A string that does not import is returned as it is, for uvicorn to
    report as it always does."""
    if not isinstance(app, str):
        return app
    from uvicorn.importer import ImportFromStringError, import_from_string

    deferred_here = not _gc_deferred
    if deferred_here:
        defer_gc()
    try:
        return import_from_string(app)
    except ImportFromStringError:
        return app
    finally:
        if deferred_here:
            # Not left to the app's lifespan: an app that is not ours has none that does it.
            freeze_startup_objects()


def uvicorn_options(max_message_bytes: int | None = None) -> dict[str, Any]:
    """Faster event loop and protocol implementations when installed (uvloop, httptools), with
    the connection limits of `connections.ConnectionLimits` (read from the environment)."""
    from .connections import ConnectionLimits

    limit = max_message_bytes or settings.MAX_MESSAGE_BYTES.get() or 8 * 1024 * 1024
    http = "httptools" if importlib.util.find_spec("httptools") else "h11"
    ws = "websockets-sansio" if importlib.util.find_spec("websockets") else "auto"
    return {
        "loop": "uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
        "http": http,
        "ws": ws,
        # Header, body and idle timeouts, bounded WebSocket sends, a connection cap: a client
        # that connects and stalls (or stops reading) holds nothing for long.
        **ConnectionLimits.from_env().uvicorn_options(http, ws),
        # Frames above our own limit get a typed MESSAGE_TOO_LARGE error instead of a dropped
        # connection; uvicorn only has to let them through.
        "ws_max_size": max(limit * 2, 16 * 1024 * 1024),
        "ws_per_message_deflate": False,
        "log_level": settings.LOG_LEVEL.get() or "info",
        # The app drains its sessions on SIGTERM within OPENENV_SHUTDOWN_GRACE (see
        # env_server/shutdown.py); uvicorn's own wait after that is bounded by the same figure.
        "timeout_graceful_shutdown": shutdown_grace(),
    }


def shutdown_grace() -> float:
    """OPENENV_SHUTDOWN_GRACE, seconds (default 10): how long SIGTERM waits for replies."""
    from .config import DEFAULT_SHUTDOWN_GRACE

    value = settings.SHUTDOWN_GRACE.get()
    return max(0.0, DEFAULT_SHUTDOWN_GRACE if value is None else value)


def run_server(
    app: str | Any,
    host: str = DEFAULT_HOST,
    port: int = 8000,
    workers: int = 1,
    reload: bool = False,
    **overrides: Any,
) -> None:
    """Serve `app` (an import string such as "echo_env.server.app:app", or an app object).

    `$OPENENV_UNIX_SOCKET` serves on that Unix socket instead of host/port.
    With `workers > 1` or `reload`, `app` must be an import string. Each worker process holds
    its own sessions, and requests for a session are routed to the process that holds it.
    """
    import uvicorn

    options = uvicorn_options()
    options.update(overrides)
    unix_socket = settings.UNIX_SOCKET.get()
    if unix_socket and "uds" not in options:
        # A container or sandbox without a network: the provider reaches it through a socket
        # file in a folder it shares with the environment.
        options["uds"] = unix_socket
    if (workers > 1 or reload) and not isinstance(app, str):
        raise ValueError(
            "workers > 1 and reload need the app as an import string, e.g. 'pkg.app:app'"
        )
    if (workers > 1 or reload) and _gc_deferred:
        # This process only supervises: the servers run in interpreters of their own, each
        # freezing its own start-up objects. Its collector (off after `defer_gc`) goes back on.
        freeze_startup_objects()
    if workers > 1 and not reload:
        from .workers import serve_workers

        serve_workers(app, host, port, workers, options)
        return
    if not reload:
        app = import_app(app)
    uvicorn.run(app, host=host, port=port, reload=reload, **options)


def server_parser(
    app: str, env_options: Mapping[str, str] | None = None
) -> argparse.ArgumentParser:
    """The command line of an environment server; see `serve_main`."""
    from openenv.core.manifest import DEFAULT_PORT, package_manifest

    manifest = package_manifest(app)
    name = manifest.name if manifest else app.partition(":")[0]
    about = f": {manifest.description}" if manifest and manifest.description else "."
    parser = argparse.ArgumentParser(description=f"Serve {name}{about}")
    parser.add_argument(
        "--host", default=DEFAULT_HOST, help="interface to bind (default: %(default)s)"
    )
    parser.add_argument(
        "--port",
        type=int,
        default=manifest.port if manifest else DEFAULT_PORT,
        help="port to listen on (default: %(default)s)",
    )
    parser.add_argument(
        "--workers", type=int, default=1, help="processes; sessions stay on their process"
    )
    parser.add_argument(
        "--reload", action="store_true", help="restart when source files change (development)"
    )
    for flag, variable in (env_options or {}).items():
        parser.add_argument(flag, dest=variable, metavar="VALUE", help=f"sets {variable}")
    return parser


def serve_main(
    app: str,
    argv: Sequence[str] | None = None,
    *,
    env_options: Mapping[str, str] | None = None,
) -> None:
    """The `main()` of an environment server: parse `--host/--port/--workers/--reload` and
    serve `app` ("pkg.server.app:app").

    The default port and the help text come from the package's `openenv.yaml`. `env_options`
    maps extra flags to the environment variables they set, for settings the environment
    reads itself: `{"--env-id": "GYMNASIUM_ENV_ID"}`. They are set before any worker starts,
    so every worker sees them.
    """
    parser = server_parser(app, env_options)
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error("--workers must be 1 or more")
    for variable in (env_options or {}).values():
        value = getattr(args, variable)
        if value is not None:
            os.environ[variable] = value
    run_server(app, host=args.host, port=args.port, workers=args.workers, reload=args.reload)
