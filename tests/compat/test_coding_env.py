"""PUBLISHED CLIENT -> OUR coding_env.

published_coding_script.py runs in the compat venv (openenv==0.10.0) with an `EnvClient`
subclass carrying OpenEnv's coding_env models: it must see OpenEnv's `stdout`/`stderr`/
`exit_code` fields, names kept across steps (OpenEnv's executor keeps one namespace) and
`last_exit_code` in the state.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.server import serve

pytestmark = pytest.mark.compat

SCRIPT = Path(__file__).resolve().parent / "published_coding_script.py"


def test_the_published_client_drives_our_coding_env(compat_python: str) -> None:
    with serve("coding_env.server.app:app") as server:
        out = subprocess.run(
            [compat_python, str(SCRIPT), server.url],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=SCRIPT.parent,  # not the repo root: nothing of ours is importable
        )
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout)
    first, second, failed = seen["steps"]
    assert (first["stdout"], first["exit_code"], first["stderr"]) == ("42\n", 0, "")
    assert (second["stdout"], second["exit_code"]) == ("43\n", 0)
    assert failed["exit_code"] == 1 and failed["stderr"].startswith("oops\n")
    assert "ZeroDivisionError: division by zero" in failed["stderr"]
    assert [s["done"] for s in seen["steps"]] == [False] * 3
    assert seen["state"]["last_exit_code"] == 1 and seen["state"]["step_count"] == 3
