"""The `/web` playground: a static page that plays an episode over the browser's own WebSocket.

Every visitor opens its own `/ws` session (the page speaks the wire protocol of
docs/protocol.md), unlike OpenEnv's Gradio page, which shares one environment between all
visitors. The page is plain HTML and JavaScript shipped in this package: nothing is imported or
built at server start, and nothing at all when the playground is off (this module is only
imported when it is on). Links inside the page are relative, so it works behind a path prefix.
"""

from __future__ import annotations

import functools
import os
from importlib import resources
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.responses import RedirectResponse, Response

from ...protocol import dumps
from ..config import WEB_INTERFACE_ENV, web_interface_enabled

__all__ = [
    "RENDERER_ATTRIBUTE",
    "WEB_INTERFACE_ENV",
    "WEB_PATH",
    "mount_playground",
    "renderer_of",
    "web_interface_enabled",
]

#: Where the playground lives (OpenEnv's path; Spaces staged by `openenv push` open it).
WEB_PATH = "/web"
#: Name of the attribute an environment class sets to ship its own observation renderer.
RENDERER_ATTRIBUTE = "web_renderer"

_STATIC = {
    "": ("index.html", "text/html; charset=utf-8"),
    "index.html": ("index.html", "text/html; charset=utf-8"),
    "app.js": ("app.js", "text/javascript; charset=utf-8"),
    "style.css": ("style.css", "text/css; charset=utf-8"),
}
#: No scripts or styles from elsewhere, no framing by other sites.
_PAGE_HEADERS = {
    "cache-control": "no-cache",
    "x-content-type-options": "nosniff",
    "content-security-policy": (
        "default-src 'self'; img-src 'self' data: blob:; style-src 'self'; "
        "script-src 'self'; connect-src 'self' ws: wss:; "
        # A Space's App tab shows the page in a frame of huggingface.co.
        "frame-ancestors 'self' https://huggingface.co https://*.hf.space"
    ),
}


def renderer_of(env: Any, renderer: str | os.PathLike[str] | None) -> Path | None:
    """The custom renderer script: the `web_renderer` option, else the environment class's
    `web_renderer` attribute (a path to a .js file)."""
    chosen = renderer if renderer is not None else getattr(env, RENDERER_ATTRIBUTE, None)
    if chosen is None:
        return None
    path = Path(chosen)
    if not path.is_file():
        raise FileNotFoundError(f"web renderer {path} does not exist")
    return path


@functools.cache
def _static(name: str) -> bytes:
    """A file of the page, read on first request (a few KiB, kept)."""
    return resources.files(__package__).joinpath("static").joinpath(name).read_bytes()


def mount_playground(
    app: FastAPI,
    *,
    title: str,
    env_name: str,
    api_key_required: bool,
    renderer: Path | None = None,
) -> None:
    """Add `/web/` (the page and its files) and redirects from `/` and `/web` to it."""
    renderer_script = renderer.read_bytes() if renderer is not None else b""
    config = dumps(
        {
            "title": title,
            "env_name": env_name,
            "api_key_required": api_key_required,
            "renderer": renderer is not None,
        }
    )

    # Relative redirects keep whatever prefix a proxy put in front of the path.
    @app.get("/", include_in_schema=False)
    async def root() -> Response:
        return RedirectResponse("web/", status_code=307)

    @app.get(WEB_PATH, include_in_schema=False)
    async def web_root() -> Response:
        return RedirectResponse("web/", status_code=307)

    @app.get(WEB_PATH + "/config.json", include_in_schema=False)
    async def web_config() -> Response:
        return Response(config, media_type="application/json", headers=_PAGE_HEADERS)

    @app.get(WEB_PATH + "/renderer.js", include_in_schema=False)
    async def web_renderer() -> Response:
        return Response(renderer_script, media_type="text/javascript", headers=_PAGE_HEADERS)

    @app.get(WEB_PATH + "/{name:path}", include_in_schema=False)
    async def web_file(name: str) -> Response:
        if name not in _STATIC:
            return Response("Not found", status_code=404, media_type="text/plain")
        filename, media_type = _STATIC[name]
        return Response(_static(filename), media_type=media_type, headers=_PAGE_HEADERS)
