"""`Sandbox(hidden=...)`: folders inside a bound one that commands must not read."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from openenv.sandbox import Sandbox, choose_backend


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder the sandbox user (nobody, under a root server) may read."""
    with tempfile.TemporaryDirectory() as name:
        os.chmod(name, 0o755)
        yield Path(name)


@pytest.mark.skipif(choose_backend() != "bubblewrap", reason="only bubblewrap can hide folders")
def test_a_hidden_folder_appears_empty_and_read_only(shared_dir: Path) -> None:
    (shared_dir / "answers").mkdir()
    (shared_dir / "answers" / "key.txt").write_text("secret\n")
    (shared_dir / "public.txt").write_text("public\n")
    (shared_dir / "answers").chmod(0o755)
    answers = shared_dir / "answers"
    script = f"cat {shared_dir}/public.txt; ls -A {answers}; touch {answers}/x"
    with Sandbox(ro_binds=[shared_dir], hidden=[shared_dir / "answers"]) as box:
        result = box.run(["bash", "-c", script])
    assert result.stdout == "public\n"
    assert "Read-only file system" in result.stderr
    with Sandbox(ro_binds=[shared_dir]) as box:
        assert box.run(["cat", f"{shared_dir}/answers/key.txt"]).stdout == "secret\n"
