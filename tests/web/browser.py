"""Headless Chromium for the playground tests: Debian's `chromium`, driven by Playwright.

Playwright's own browser download is not reachable from CI, so the system binary is launched by
path; without it (or without Playwright) the tests skip and say why. Screenshots go to
`test-artifacts/web/` (git-ignored), which CI keeps.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.server import REPO

ARTIFACTS = REPO / "test-artifacts" / "web"
#: How long the page may take to connect or answer: generous, for a loaded machine.
PAGE_TIMEOUT_MS = 60_000


def chromium_path() -> str | None:
    explicit = os.environ.get("OPENENV_CHROMIUM")
    if explicit:
        return explicit
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


# Per module: the sync API runs an event loop of its own while it is open, which the async
# tests of other modules must not find running.
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = chromium_path()
    if executable is None:
        pytest.skip("no Chromium on this machine (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    with sync_api.sync_playwright() as playwright:
        # --no-sandbox: CI runs as root, where Chromium's own sandbox refuses to start.
        launched = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


def screenshot(page: Any, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def open_playground(context: Any, url: str) -> Any:
    """A page on the playground, connected (its session frame arrived)."""
    page = context.new_page()
    page.set_default_timeout(PAGE_TIMEOUT_MS)
    page.goto(url)
    page.wait_for_selector("body[data-ready=true]")
    return page


def click_and_wait(page: Any, selector: str) -> None:
    """Click a button that sends a request, and wait until the page has shown its answer."""
    before = int(page.evaluate("Number(document.body.dataset.replies || 0)"))
    page.click(selector)
    page.wait_for_function("n => Number(document.body.dataset.replies || 0) > n", arg=before)


def reset(page: Any, seed: int | None = None) -> None:
    if seed is not None:
        page.fill("#seed", str(seed))
    click_and_wait(page, "#reset")
