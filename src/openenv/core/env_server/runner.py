"""Run an environment app with uvicorn, tuned for many sessions and fast steps."""

from __future__ import annotations

import importlib.util
import os
from typing import Any


def uvicorn_options(max_message_bytes: int | None = None) -> dict[str, Any]:
    """Faster event loop and protocol implementations when installed (uvloop, httptools)."""
    limit = max_message_bytes or int(os.environ.get("OPENENV_MAX_MESSAGE_BYTES", 8 * 1024 * 1024))
    return {
        "loop": "uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
        "http": "httptools" if importlib.util.find_spec("httptools") else "h11",
        "ws": "websockets-sansio" if importlib.util.find_spec("websockets") else "auto",
        # Frames above our own limit get a typed MESSAGE_TOO_LARGE error instead of a dropped
        # connection; uvicorn only has to let them through.
        "ws_max_size": max(limit * 2, 16 * 1024 * 1024),
        "ws_per_message_deflate": False,
        "log_level": os.environ.get("OPENENV_LOG_LEVEL", "info"),
        "timeout_graceful_shutdown": 10,
    }


def run_server(
    app: str | Any,
    host: str = "0.0.0.0",
    port: int = 8000,
    workers: int = 1,
    reload: bool = False,
    **overrides: Any,
) -> None:
    """Serve `app` (an import string such as "echo_env.server.app:app", or an app object).

    With `workers > 1` or `reload`, `app` must be an import string. Each worker process holds
    its own sessions, and requests for a session are routed to the process that holds it.
    """
    import uvicorn

    options = uvicorn_options()
    options.update(overrides)
    if (workers > 1 or reload) and not isinstance(app, str):
        raise ValueError(
            "workers > 1 and reload need the app as an import string, e.g. 'pkg.app:app'"
        )
    if workers > 1 and not reload:
        from .workers import serve_workers

        serve_workers(app, host, port, workers, options)
        return
    uvicorn.run(app, host=host, port=port, reload=reload, **options)
