"""Helpers for the terminal environment's tests."""

from __future__ import annotations

import os
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


@pytest.fixture
def tasks_dir() -> Iterator[Path]:
    """A folder for hand-made tasks that the sandbox user (nobody, under a root server) can
    read: pytest's own tmp_path is private to its owner."""
    with tempfile.TemporaryDirectory(prefix="terminal-tasks-") as name:
        os.chmod(name, 0o755)
        yield Path(name)


@pytest.fixture
def make_task(tasks_dir: Path) -> Callable[..., Path]:
    """`make_task("id", {"task.yaml": "...", "verify.sh": "..."})` writes a task folder."""

    def make(task_id: str, files: dict[str, str]) -> Path:
        folder = tasks_dir / task_id
        for name, text in files.items():
            path = folder / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(text).lstrip("\n"))
        for path in [folder, *folder.rglob("*")]:
            path.chmod(0o755 if path.is_dir() or path.suffix == ".sh" else 0o644)
        return folder

    return make
