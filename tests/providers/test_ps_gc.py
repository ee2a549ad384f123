"""`openenv ps` and `openenv gc`, run as commands against environments of real trainers."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.providers.leaks import (
    REPO,
    end_trainer,
    leftovers,
    run_gc,
    start_trainer,
    tagged_processes,
    trainer_environ,
)

ECHO = str(REPO / "envs" / "echo_env")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("uv") is None, reason="uv is not installed"),
]


def openenv(state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "openenv.cli", *args],
        cwd=REPO,
        env=trainer_environ(state_dir),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )


def listed(state_dir: Path) -> list[dict]:
    result = openenv(state_dir, "ps", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_nothing_to_list_or_remove(tmp_path: Path) -> None:
    assert listed(tmp_path / "state") == []
    gc = run_gc(tmp_path / "state")
    assert gc.returncode == 0 and "Nothing to remove" in gc.stderr


def test_an_unreadable_record_is_reported_not_deleted(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "resources").mkdir(parents=True)
    broken = state / "resources" / "uv-half.json"
    broken.write_text('{"id": "uv-half", "prov')
    gc = run_gc(state)
    assert gc.returncode == 0
    assert "unreadable record" in gc.stderr and "uv-half.json" in gc.stderr
    assert broken.exists()


def test_gc_spares_a_live_trainer_unless_told(tmp_path: Path) -> None:
    state = tmp_path / "state"
    trainer = start_trainer("uv", ECHO, "sigkill", state_dir=state)
    try:
        [row] = listed(state)
        assert row["provider"] == "uv" and row["id"] == trainer.report["id"]
        assert row["owner"]["pid"] == trainer.report["pid"]
        assert (row["owner_alive"], row["running"], row["orphaned"]) == (True, True, False)
        assert row["address"] == trainer.report["base_url"]

        assert "Nothing to remove" in run_gc(state).stderr
        refused = run_gc(state, "--all")  # asks; no answer on stdin is a no
        assert refused.returncode != 0
        assert [r["id"] for r in listed(state)] == [trainer.report["id"]]

        removed = run_gc(state, "--all", "--yes")
        assert removed.returncode == 0, removed.stderr
        assert f"removed uv {trainer.report['id']}" in removed.stdout
        assert listed(state) == []
        # The trainer still runs (it carries the tag too); nothing it started does.
        assert tagged_processes(trainer.tag) == [trainer.report["pid"]]
    finally:
        end_trainer(trainer, "sigkill")
    assert leftovers(trainer, "uv") == []


def test_gc_dry_run_then_gc_of_an_orphan(tmp_path: Path) -> None:
    state = tmp_path / "state"
    trainer = start_trainer("uv", ECHO, "sigkill", state_dir=state)
    end_trainer(trainer, "sigkill")

    table = openenv(state, "ps")
    assert trainer.report["id"] in table.stdout
    [row] = listed(state)
    assert row["owner_alive"] is False and row["orphaned"] is True

    dry = run_gc(state, "--dry-run")
    assert dry.returncode == 0
    assert f"would remove uv {trainer.report['id']}" in dry.stdout
    assert len(listed(state)) == 1

    gc = run_gc(state)
    assert gc.returncode == 0 and f"removed uv {trainer.report['id']}" in gc.stdout
    assert listed(state) == []
    assert leftovers(trainer, "uv") == []
