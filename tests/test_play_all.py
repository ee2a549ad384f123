"""examples/play_all.py serves every environment and plays an episode against each."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.support.envs import installed
from tests.support.server import REPO

EXPECTED = {
    "echo",
    "math",
    "chess",
    "grid_world",
    "maze",
    "connect4",
    "terminal",
    "coding",
    "snake",
    "gymnasium",
    "trading",
    "jupyter",
    "textarena",
    "openspiel",
    "atari",
    "reasoning_gym",
    "repo",
}
# Played when they can run here (see tests/support/envs.py).
EXPECTED -= {name for name in ("reasoning_gym", "repo") if not installed(f"{name}_env")}


def test_play_all_plays_every_environment() -> None:
    out = subprocess.run(
        [sys.executable, "examples/play_all.py"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    played = dict(re.findall(r"^EPISODE (\w+) steps=(\d+) total=", out.stdout, re.M))
    assert EXPECTED <= set(played), out.stdout
    assert all(int(steps) > 0 for steps in played.values())
    assert "FAIL" not in out.stdout
