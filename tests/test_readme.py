"""The README's quick starts stay true."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from openenv.core.manifest import tomllib
from tests.support.envs import installed

REPO = Path(__file__).resolve().parents[1]


def first_screen_commands() -> list[str]:
    """The commands of the README's first bash block, as .ci/fresh-machine.sh reads them."""
    readme = (REPO / "README.md").read_text()
    block = re.search(r"^```bash\n(.*?)^```", readme, re.S | re.M)
    assert block, "the README has no bash block"
    lines = [line.strip() for line in block.group(1).splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def test_readme_first_screen_gives_the_two_commands() -> None:
    head = "\n".join((REPO / "README.md").read_text().splitlines()[:25])
    quickstart, tests = first_screen_commands()
    assert f"{quickstart}\n" in head and f"{tests}\n" in head
    # A fresh Debian or Ubuntu refuses `pip install` outside a virtual environment (PEP 668).
    for command in (quickstart, tests):
        assert command.startswith("python3 -m venv "), command
        assert not re.search(r"(^|&& )pip3? install", command), command
    # The quick start installs openenv and the echo environment, nothing else.
    assert "pip install -e . -e ./envs/echo_env &&" in quickstart
    assert quickstart.endswith("python examples/quickstart.py")
    # The tests run from the lock file, as CI runs them; .ci/run checks both in fresh containers.
    assert "uv sync --all-packages --locked --inexact &&" in tests
    assert tests.endswith("uv run pytest")
    ci = (REPO / ".ci" / "run").read_text()
    assert "uv sync --all-packages --locked" in ci and "uv run pytest" in ci
    assert "bash .ci/fresh-machine.sh" in ci
    # ... which reads the same two commands from the README.
    script = subprocess.run(
        ["bash", ".ci/fresh-machine.sh", "--commands"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert script.stdout.splitlines() == [quickstart, tests]


def test_readme_table_lists_every_environment_with_its_types() -> None:
    """Each row names the env's action/observation classes (from openenv.yaml), real fields of
    them, and the env's dependencies besides openenv."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("\n## Environments\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells
    envs = {p.parent.name: p for p in (REPO / "envs").glob("*/openenv.yaml")}
    assert set(rows) == set(envs)
    for name, manifest_path in envs.items():
        if not installed(name):
            continue  # its classes cannot be imported (tests/support/envs.py)
        _, _, action, observation, needs = rows[name]
        manifest = yaml.safe_load(manifest_path.read_text())
        for cell, reference in (
            (action, manifest["action"]),
            (observation, manifest["observation"]),
        ):
            named = re.findall(r"`([^`]+)`", cell)
            module, _, cls_name = reference.partition(":")
            assert named[0] == cls_name, (name, cell, reference)
            cls = getattr(importlib.import_module(module), cls_name)
            wire_names = {f.alias or key for key, f in cls.model_fields.items()}
            assert set(named[1:]) <= set(cls.model_fields) | wire_names, (name, cell)
        pyproject = tomllib.loads((manifest_path.parent / "pyproject.toml").read_text())
        deps = {
            re.match(r"[A-Za-z0-9_.-]+", dep).group(0)
            for dep in pyproject["project"]["dependencies"]
        } - {"openenv"}
        assert set(re.findall(r"`([^`]+)`", needs)) == deps, (name, needs)


def test_quickstart_starts_echo_runs_an_episode_and_leaves_nothing(tmp_path: Path) -> None:
    state = tmp_path / "state"
    out = subprocess.run(
        [sys.executable, "examples/quickstart.py"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OPENENV_STATE_DIR": str(state)},
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "Echo environment ready!" in lines
    assert "Hello, World!" in lines
    assert "Hello again!" in lines
    assert "tools: echo_message, echo_with_length" in lines
    # Both environments it started were stopped (their records go with them).
    assert not list(state.rglob("*.json"))


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
