"""CI's host run leaves out the tests that passed on the fresh machine, and only those."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ID_WITH_SPACES = "test_sample.py::test_passes_with_an_id_holding_spaces[two words\\nand a line]"

TESTS = """
import pytest

def test_passes():
    pass

@pytest.mark.parametrize("text", ["two words\\nand a line"])
def test_passes_with_an_id_holding_spaces(text):
    pass

def test_fails():
    assert False

@pytest.fixture
def broken_teardown():
    yield
    raise RuntimeError("teardown")

def test_passes_but_its_teardown_errors(broken_teardown):
    pass

def test_skips():
    pytest.skip("not here")

@pytest.mark.xfail(reason="known")
def test_xfails():
    assert False
"""


def _pytest(folder: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.support.passed_elsewhere",
            "-p",
            "no:cacheprovider",
        ],
        cwd=folder,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_only_tests_that_passed_whole_are_recorded_and_left_out(tmp_path: Path) -> None:
    (tmp_path / "test_sample.py").write_text(TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    record = tmp_path / "passed.txt"

    first = _pytest(tmp_path, OPENENV_TESTS_RECORD_PASSED=str(record))
    assert first.returncode == 1, first.stdout
    assert json.loads(record.read_text()) == ["test_sample.py::test_passes", ID_WITH_SPACES]

    second = _pytest(tmp_path, OPENENV_TESTS_PASSED_IN=str(record))
    assert "2 tests left out" in second.stdout, second.stdout
    assert "4 run here" in second.stdout
    assert "test_sample.py::test_passes " not in second.stdout
    assert "2 deselected" in second.stdout


def test_a_missing_listing_runs_everything(tmp_path: Path) -> None:
    (tmp_path / "test_sample.py").write_text(TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    result = _pytest(tmp_path, OPENENV_TESTS_PASSED_IN=str(tmp_path / "absent.txt"))
    assert "does not exist: every selected test runs here" in result.stdout, result.stdout
    assert "deselected" not in result.stdout
    assert "1 failed, 3 passed, 1 skipped, 1 xfailed, 1 error" in result.stdout
