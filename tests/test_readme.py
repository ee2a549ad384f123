"""The README's quick starts stay true."""

from __future__ import annotations

import importlib
import os
import re
import shutil
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


def readme_blocks(readme: Path | None = None) -> tuple[int, str, str, str]:
    """`.ci/fresh-machine.sh --blocks` (on a copy of the script beside `readme`, if given):
    (exit status, listing of every block's fate, programs by file name, stderr)."""
    root = REPO
    if readme is not None:
        root = readme.parent
        (root / ".ci").mkdir(exist_ok=True)
        shutil.copy(REPO / ".ci" / "fresh-machine.sh", root / ".ci" / "fresh-machine.sh")
    out = subprocess.run(
        ["bash", ".ci/fresh-machine.sh", "--blocks"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    listing, _, rest = out.stdout.partition("\n\n==> ")
    return out.returncode, listing, "==> " + rest if rest else "", out.stderr


def programs(text: str) -> dict[str, str]:
    return dict(
        chunk.split("\n", 1)
        for chunk in text.split("==> ")[1:]  # type: ignore[misc]
    )


def test_every_readme_code_block_runs_on_a_fresh_machine_or_says_why_not() -> None:
    """.ci/fresh-machine.sh runs every python/bash block after the quick start, except those
    marked `<!-- not run: reason -->`; `<!-- continues the block above -->` joins two."""
    status, listing, text, stderr = readme_blocks()
    assert status == 0, stderr
    readme = (REPO / "README.md").read_text()
    fences = re.findall(r"^```(python|bash)$", readme, re.M)
    lines = listing.splitlines()
    assert len(lines) == len(fences), listing
    assert lines[0].endswith(": the two commands above")
    fates = [line.split("): ", 1)[1] for line in lines[1:]]
    assert all(
        fate.startswith(("runs (", "runs with the block above", "not run: ")) for fate in fates
    ), listing
    run = programs(text)
    # What runs is the README's text: one block, or consecutive ones joined, as written.
    bodies = re.findall(r"^```(?:python|bash)\n(.*?)^```", readme, re.S | re.M)
    joined = {
        "".join(bodies[i:j]) for i in range(len(bodies)) for j in range(i + 1, len(bodies) + 1)
    }
    assert len(run) >= 3
    for program in run.values():
        assert program.rstrip("\n") + "\n" in joined, program
    author = next(p for p in run.values() if "class GuessEnvironment" in p)
    assert "class GuessEnv(EnvClient" in author  # the client snippet continues that block


def test_a_marker_without_its_reason_is_refused(tmp_path: Path) -> None:
    readme = (REPO / "README.md").read_text()
    broken = readme.replace("<!-- not run: /path/to/openenv", "<!-- not run /path/to/openenv", 1)
    assert broken != readme
    (tmp_path / "README.md").write_text(broken)
    status, _, _, stderr = readme_blocks(tmp_path / "README.md")
    assert status != 0 and "malformed marker" in stderr


def test_the_readme_python_blocks_run_after_the_quick_start(tmp_path: Path) -> None:
    """Each runnable python block, run as the fresh machine runs it. They may only start
    environments that the quick start installs (there, nothing else is installed)."""
    status, _, text, stderr = readme_blocks()
    assert status == 0, stderr
    quickstart = first_screen_commands()[0]
    installed_by_quickstart = {
        normalize(name) for name in re.findall(r"-e \./envs/(\w+)_env", quickstart)
    }
    for name, program in programs(text).items():
        if not name.endswith(".py"):
            continue
        used = {normalize(env) for env in re.findall(r"from_env\(\s*['\"]([^'\"]+)", program)}
        assert used <= installed_by_quickstart, (name, used - installed_by_quickstart)
        script = tmp_path / name
        script.write_text(program)
        out = subprocess.run(
            [sys.executable, str(script)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "OPENENV_STATE_DIR": str(tmp_path / "state")},
        )
        assert out.returncode == 0, (name, out.stderr)


def normalize(name: str) -> str:
    from openenv.auto import normalize_env_name

    return normalize_env_name(name)


def test_links_in_the_readme_docs_and_pyproject_lead_somewhere() -> None:
    """Relative links name files that exist; OpenEnv is linked at its current home."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    pages += sorted(REPO.glob("envs/*/README.md"))
    missing = []
    for page in pages:
        text = page.read_text()
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:|#", target):
                continue
            if not (page.parent / target.split("#")[0]).exists():
                missing.append((page.name, target))
        for repo in re.findall(r"github\.com/([\w.-]+/OpenEnv)\b", text, re.I):
            assert repo == "meta-pytorch/OpenEnv", (page.name, repo)
    for toml in [REPO / "pyproject.toml", *sorted(REPO.glob("envs/*/pyproject.toml"))]:
        for path in re.findall(
            r"(?<![\w/])((?:docs|examples|bench)/[\w./-]+\.(?:md|py))", toml.read_text()
        ):
            if not (REPO / path).exists():
                missing.append((str(toml.relative_to(REPO)), path))
    assert not missing, missing
