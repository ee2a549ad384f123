"""Harness code written for OpenEnv 0.10 (`openenv.core.harness`) runs here unchanged.

harness_snippets.py runs once with the compat venv's python (`openenv==0.10.0`) and once with
ours; every result must be the same except the deliberate differences documented in
docs/compatibility.md: a turn the harness failed is an infrastructure failure here (reward None,
category "infrastructure"), where OpenEnv scores it 0.0; and a turn in which no environment gave
a reward (here: tools alone, no environment) has reward None, where OpenEnv says 0.0.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from .conftest import OUR_PYTHON

pytestmark = pytest.mark.compat

SCRIPT = Path(__file__).resolve().parent / "harness_snippets.py"


def _run(python: str) -> dict[str, Any]:
    result = subprocess.run(
        [python, str(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=110,
        cwd=SCRIPT.parent,  # not the repo root: `openenv` is each venv's own package
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def test_harness_code_written_for_openenv_runs_the_same(compat_python: str) -> None:
    published, ours = _run(compat_python), _run(OUR_PYTHON)
    assert published["injected"] == [["env_add"], True]  # the clash got the prefix, a bridge ran
    assert published["t2"] == [True, "turn 2: again", 2]  # context across turns, done at 2
    crash_published, crash_ours = published.pop("crash"), ours.pop("crash")
    assert (published["t1"][1], ours["t1"][1]) == (0.0, None)  # the turn's reward
    published["t1"][1] = ours["t1"][1] = "turn reward"
    assert ours == published
    assert crash_published == {
        "done": True,
        "reward": 0.0,
        "error_type": "harness_crashed",
        "category": None,
        "events": ["error"],
    }
    assert crash_ours == {**crash_published, "reward": None, "category": "infrastructure"}
