"""The README's quick starts stay true."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_readme_first_screen_names_the_two_commands() -> None:
    head = "\n".join((REPO / "README.md").read_text().splitlines()[:20])
    assert "uv sync --all-packages && uv run python examples/quickstart.py" in head
    assert "uv sync --all-packages && uv run pytest" in head
    ci = (REPO / ".ci" / "run").read_text()
    assert "uv sync --all-packages" in ci and "uv run pytest" in ci


def test_quickstart_serves_echo_and_runs_an_episode() -> None:
    out = subprocess.run(
        [sys.executable, "examples/quickstart.py"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "Echo environment ready!" in lines
    assert "Hello, World!" in lines
    assert "Hello again!" in lines
    assert "tools: echo_message, echo_with_length" in lines


def test_author_quick_start_snippet_runs(tmp_path: Path) -> None:
    """The environment-author snippet defines a working app (exercised in-process)."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Quick start for environment authors", 1)[1]
    snippet = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    script = tmp_path / "guess_env.py"
    script.write_text(
        snippet
        + "\n"
        + "from starlette.testclient import TestClient\n"
        + "with TestClient(app) as http:\n"
        + "    sid = http.post('/reset', json={'seed': 3}, headers={'X-OpenEnv-Session-Id': 'new'})"
        + ".json()['session_id']\n"
        + "    hdr = {'X-OpenEnv-Session-Id': sid}\n"
        + "    r = http.post('/step', json={'action': {'guess': 3}}, headers=hdr).json()\n"
        + "    assert r['reward'] == 1.0 and r['done'] is True, r\n"
        + "    assert http.get('/state', headers=hdr).json()['step_count'] == 1\n"
        + "from openenv.testing import check_env\n"
        + "samples = [GuessAction(guess=g) for g in range(10)]\n"
        + "report = check_env(GuessEnvironment, sample_actions=samples)\n"
        + "assert report.ok and not report.warnings, str(report)\n"
        + "print('ok')\n"
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("ok")
