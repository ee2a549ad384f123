"""What the `openenv` command prints reaches the terminal as written: hints with brackets
(`pip install 'openenv[docker]'`) are not read as rich markup, and `--help` shows flags as
flags. Each test runs the real console script (or its `main`) in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.server import REPO, serve

OPENENV = str(Path(sys.executable).with_name("openenv"))


def openenv_without(module: str, *args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """`openenv ARGS` in a new interpreter where `import MODULE` fails, as when it is not
    installed (the README's quick start installs neither docker nor datasets)."""
    code = (
        "import sys\n"
        f"sys.modules[{module!r}] = None\n"
        f"sys.argv = ['openenv', *{list(args)!r}]\n"
        "from openenv.cli.__main__ import main\n"
        "main()\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "200", "OPENAI_API_KEY": "", "API_KEY": ""},
    )


def test_build_without_the_docker_sdk_names_the_extra_literally() -> None:
    out = openenv_without("docker", "build", str(REPO / "envs" / "echo_env"))
    assert out.returncode == 1, out.stderr
    assert "the Docker SDK for Python is not installed" in out.stderr
    assert "pip install 'openenv[docker]'" in out.stderr, out.stderr


def test_collect_without_datasets_writes_train_jsonl_and_names_the_extra(tmp_path: Path) -> None:
    """docs/cli.md: `train.jsonl` is always written; only `dataset/` needs `datasets`."""
    with serve("connect4_env.server.app:app") as server:
        out = openenv_without(
            "datasets",
            "collect", "connect4", "--base-url", server.url, "-o", str(tmp_path), "-n", "2",
            "--keep-losses", "--smoke-test",
        )  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = (tmp_path / "train.jsonl").read_text().splitlines()
    assert len(lines) == 2 and {json.loads(line)["episode_id"] for line in lines} == {
        "ep-000000",
        "ep-000001",
    }
    assert not (tmp_path / "dataset").exists()
    assert f"train: {tmp_path / 'train.jsonl'}" in out.stderr
    assert "pip install 'openenv[collect]'" in out.stderr, out.stderr


def test_an_error_with_brackets_is_printed_as_it_is(tmp_path: Path) -> None:
    """A user's path with brackets in `fail`'s message (markup would eat `[bold]`)."""
    target = tmp_path / "[bold]" / "x[red]"
    target.parent.mkdir()
    target.write_text("a file")
    out = subprocess.run(
        [OPENENV, "validate", str(target)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 2
    assert str(target) in out.stderr.replace("\n", ""), out.stderr


def test_help_shows_flags_without_a_type() -> None:
    for command in (["serve"], ["collect"], ["ps"], ["skills", "add"], ["model", "serve"]):
        out = subprocess.run(
            [OPENENV, *command, "--help"],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "COLUMNS": "200"},
        )
        assert out.returncode == 0, out.stderr
        assert "<bool>" not in out.stdout, out.stdout
    serve_help = subprocess.run(
        [OPENENV, "serve", "--help"], capture_output=True, text=True, timeout=120
    ).stdout
    assert "--reload / --no-reload " in serve_help
    assert "--port <int>" in serve_help  # options that take a value still say what
