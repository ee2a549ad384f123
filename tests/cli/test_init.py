"""`openenv init`, through the console script: the generated folder serves, validates, tests."""

from __future__ import annotations

import ast
import contextlib
import importlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from openenv.cli.commands.init import openenv_requirement
from openenv.cli.wheels import openenv_source_root
from openenv.core.manifest import load_project, tomllib
from openenv.testing import check_server
from tests.support.server import free_port, wait_healthy

OPENENV = str(Path(sys.executable).with_name("openenv"))

#: OpenEnv's flat layout, the default: the folder is the package.
EXPECTED_FILES = {
    "README.md",
    "openenv.yaml",
    "pyproject.toml",
    "__init__.py",
    "client.py",
    "models.py",
    "server/__init__.py",
    "server/app.py",
    "server/my_game_environment.py",
    "server/Dockerfile",
    "tests/test_my_game.py",
}
#: `--layout package`: the package in a folder of its own.
PACKAGE_FILES = {
    "README.md",
    "openenv.yaml",
    "pyproject.toml",
    "my_game/__init__.py",
    "my_game/client.py",
    "my_game/models.py",
    "my_game/server/__init__.py",
    "my_game/server/app.py",
    "my_game/server/my_game_environment.py",
    "tests/test_my_game.py",
}


def openenv(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [OPENENV, *args], capture_output=True, text=True, timeout=60, cwd=cwd, check=False
    )


@contextlib.contextmanager
def generated_package(root: Path, package: str) -> Iterator[ModuleType]:
    """Import a generated package from its folder, and forget it afterwards."""
    sys.path.insert(0, str(root))
    try:
        yield importlib.import_module(package)
    finally:
        sys.path.remove(str(root))
        for name in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
            del sys.modules[name]


def files_in(folder: Path) -> set[str]:
    """Every file below `folder`, without the caches that running it creates."""
    caches = {"__pycache__", ".pytest_cache"}
    return {
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*")
        if p.is_file() and not caches.intersection(p.relative_to(folder).parts)
    }


def relative_checkout(folder: Path) -> str:
    return Path(os.path.relpath(openenv_source_root(), folder)).as_posix()


@pytest.fixture(scope="module")
def init_run(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    out = tmp_path_factory.mktemp("init")
    return openenv("init", "my_game", "-o", str(out))


@pytest.fixture(scope="module")
def generated(init_run: subprocess.CompletedProcess[str]) -> Path:
    assert init_run.returncode == 0, init_run.stderr
    return Path(init_run.stdout.strip())


def test_generates_the_environment_folder(
    init_run: subprocess.CompletedProcess[str], generated: Path
) -> None:
    assert generated.name == "my_game"
    assert files_in(generated) == EXPECTED_FILES
    for step in ("cd ", "openenv serve", "openenv validate", "pytest"):
        assert step in init_run.stderr

    project = load_project(generated)
    assert project.flat and project.package == "my_game" and project.package_dir == generated
    manifest = project.manifest
    assert (manifest.spec_version, manifest.name, manifest.type) == (1, "my_game", "space")
    # OpenEnv's flat layout: the app is imported from inside the folder.
    assert (manifest.runtime, manifest.app, manifest.port) == ("fastapi", "server.app:app", 8000)
    assert manifest.client == "my_game.client:MyGameEnv"
    assert manifest.action == "my_game.models:MyGameAction"
    assert manifest.observation == "my_game.models:MyGameObservation"
    assert manifest.description

    pyproject = project.pyproject
    assert (project.dist_name, project.version) == ("openenv-my-game", "0.1.0")
    assert pyproject["project"]["requires-python"] == ">=3.10"
    assert pyproject["project"]["readme"] == "README.md"
    assert project.dependencies == [openenv_requirement()]
    assert re.fullmatch(r"openenv>=(\d+)\.(\d+),<\1\.\d+", openenv_requirement())
    assert project.scripts == {"server": "my_game.server.app:main"}
    assert pyproject["project"]["optional-dependencies"]["dev"][0].startswith("pytest")
    assert pyproject["dependency-groups"]["dev"][0].startswith("pytest")
    setuptools = pyproject["tool"]["setuptools"]
    assert setuptools["package-dir"] == {"my_game": ".", "my_game.server": "server"}
    assert pyproject["tool"]["setuptools"]["package-data"] == {"my_game": ["openenv.yaml"]}
    # Outside any workspace, uv takes openenv from the checkout this command runs from, by a
    # relative path (the folder may be committed and cloned beside another clone).
    source = pyproject["tool"]["uv"]["sources"]["openenv"]
    assert source == {"path": relative_checkout(generated), "editable": True}
    assert not Path(source["path"]).is_absolute()
    assert (generated / source["path"]).resolve() == openenv_source_root().resolve()
    # server/Dockerfile, as in OpenEnv's layout: the template, installing the package's wheel.
    dockerfile = (generated / "server" / "Dockerfile").read_text()
    assert "--find-links /tmp/wheels openenv-my-game" in dockerfile
    assert '"openenv.core.env_server.boot", "my_game.server.app"' in dockerfile


def test_package_layout_keeps_the_package_in_its_own_folder(tmp_path: Path) -> None:
    out = openenv("init", "my_game", "-o", str(tmp_path), "--layout", "package")
    assert out.returncode == 0, out.stderr
    generated = tmp_path / "my_game"
    assert files_in(generated) == PACKAGE_FILES  # no Dockerfile: build and push generate it
    project = load_project(generated)
    assert not project.flat and project.package_dir == generated / "my_game"
    assert project.manifest.app == "my_game.server.app:app"
    assert project.manifest.client == "my_game.client:MyGameEnv"
    assert project.scripts == {"server": "my_game.server.app:main"}
    wheel = project.pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert wheel["packages"] == ["my_game"]
    assert wheel["force-include"] == {"openenv.yaml": "my_game/openenv.yaml"}
    assert project.pyproject["tool"]["pytest"]["ini_options"]["pythonpath"] == ["."]
    environment = (generated / "my_game/server/my_game_environment.py").read_text()
    assert "from ..models import (" in environment and "except ImportError" not in environment
    for relative in PACKAGE_FILES:
        assert not re.search(rb"\{\{|\}\}", (generated / relative).read_bytes()), relative


def test_unknown_layout_is_a_usage_error(tmp_path: Path) -> None:
    out = openenv("init", "my_game", "-o", str(tmp_path), "--layout", "nested")
    assert out.returncode == 2
    assert "--layout flat or --layout package" in out.stderr
    assert list(tmp_path.iterdir()) == []


def test_readme_is_a_space_card_and_documents_the_game(generated: Path) -> None:
    readme = (generated / "README.md").read_text()
    assert readme.startswith("---\n")
    card = yaml.safe_load(readme.split("---\n")[1])
    assert card["title"] == "My Game"
    assert card["sdk"] == "docker"
    assert (card["app_port"], card["base_path"], card["pinned"]) == (8000, "/web", False)
    assert card["tags"] == ["openenv"]
    assert card["emoji"]
    assert card["colorFrom"] != card["colorTo"]
    for topic in ("Action", "Observation", "Reward", "Reset options", "openenv serve"):
        assert topic in readme
    for usage in (".sync()", "MyGameEnv(", "openenv validate", "openenv build"):
        assert usage in readme


def test_generated_text_has_lf_endings_and_no_placeholders(generated: Path) -> None:
    for relative in EXPECTED_FILES:
        data = (generated / relative).read_bytes()
        assert b"\r" not in data, relative
        assert data.endswith(b"\n"), relative
        assert not re.search(rb"\{\{|\}\}", data), relative


def test_serves_and_plays_over_the_wire(generated: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [OPENENV, "serve", str(generated), "--host", "127.0.0.1", "--port", str(port)],
        env={**os.environ, "OPENENV_LOG_LEVEL": "warning"},
        cwd=generated.parent,
    )
    try:
        wait_healthy(url, server)
        report = check_server(url, raise_on_failure=False)
        assert report.ok, str(report)
        with generated_package(generated.parent, "my_game") as game:
            with game.MyGameEnv(base_url=url).sync() as env:
                result = env.reset(seed=11)
                low, high, hints = result.observation.low, result.observation.high, []
                while not result.done:
                    guess = (low + high) // 2
                    result = env.step(game.MyGameAction(guess=guess))
                    hints.append(result.observation.hint)
                    if result.observation.hint == "higher":
                        low = guess + 1
                    elif result.observation.hint == "lower":
                        high = guess - 1
                state = env.state()
            assert isinstance(result.observation, game.MyGameObservation)
            assert isinstance(state, game.MyGameState)
            assert state.solved
        assert hints[-1] == "correct"
        assert set(hints[:-1]) <= {"higher", "lower"}
        assert 1 <= len(hints) <= 7
        assert result.reward == pytest.approx(1.0)
    finally:
        server.terminate()
        assert server.wait(60) in (0, -signal.SIGTERM)


def test_env_suffix_is_dropped_from_classes_and_distribution(tmp_path: Path) -> None:
    out = openenv("init", "board_env", "-o", str(tmp_path))
    assert out.returncode == 0, out.stderr
    root = tmp_path / "board_env"
    assert (root / "server/board_env_environment.py").is_file()  # OpenEnv names it so
    assert (root / "tests/test_board_env.py").is_file()
    project = load_project(root)
    assert project.dist_name == "openenv-board"
    assert project.manifest.client == "board_env.client:BoardEnv"
    assert project.manifest.action == "board_env.models:BoardAction"
    client = ast.parse((root / "client.py").read_text())
    classes = {c.name: ast.unparse(c.bases[0]) for c in client.body if isinstance(c, ast.ClassDef)}
    assert classes == {"BoardEnv": "EnvClient[BoardAction, BoardObservation, BoardState]"}
    models = ast.parse((root / "models.py").read_text())
    names = {c.name for c in models.body if isinstance(c, ast.ClassDef)}
    assert names == {"BoardAction", "BoardObservation", "BoardState"}


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [
        ("My-Game", "my_game"),
        ("MyGame", "my_game"),
        ("2048", "env_2048"),
        ("class", "class_env"),
        ("my__game", "my_game"),
        ("openenv", "openenv_env"),
    ],
)
def test_refuses_invalid_names(tmp_path: Path, name: str, suggestion: str) -> None:
    out = openenv("init", name, "-o", str(tmp_path))
    assert out.returncode == 2
    assert "is not a valid environment name" in out.stderr
    assert f"openenv init {suggestion}" in out.stderr
    assert list(tmp_path.iterdir()) == []


def test_refuses_a_non_empty_target_and_leaves_it_alone(tmp_path: Path) -> None:
    (tmp_path / "my_game").mkdir()
    (tmp_path / "my_game" / "notes.txt").write_text("mine")
    out = openenv("init", "my_game", "-o", str(tmp_path))
    assert out.returncode == 2
    assert "already exists and is not empty" in out.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["my_game"]
    assert files_in(tmp_path / "my_game") == {"notes.txt"}


def test_fills_an_empty_target_and_creates_missing_folders(tmp_path: Path) -> None:
    (tmp_path / "a" / "my_game").mkdir(parents=True)
    assert openenv("init", "my_game", "-o", str(tmp_path / "a")).returncode == 0
    assert files_in(tmp_path / "a" / "my_game") == EXPECTED_FILES
    assert openenv("init", "my_game", "-o", str(tmp_path / "b" / "c")).returncode == 0
    assert files_in(tmp_path / "b" / "c" / "my_game") == EXPECTED_FILES


def test_a_failure_midway_leaves_nothing_behind(tmp_path: Path) -> None:
    # Valid, but `<name>_environment.py` is longer than a file name may be (255 bytes),
    # so writing fails after several files are already in the staging folder.
    name = "g" * 242
    out = openenv("init", name, "-o", str(tmp_path / "new" / "deeper"))
    assert out.returncode == 1
    assert "could not create" in out.stderr
    assert list(tmp_path.iterdir()) == []


def test_uses_the_uv_workspace_that_covers_the_target(tmp_path: Path) -> None:
    # A workspace whose root is openenv, like this repository: members take openenv from it.
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "openenv"\nversion = "0"\n\n[tool.uv.workspace]\nmembers = ["envs/*"]\n'
    )
    inside = openenv("init", "my_game", "-o", str(tmp_path / "envs"))
    assert inside.returncode == 0, inside.stderr
    assert "uv workspace" in inside.stderr
    outside = openenv("init", "my_game", "-o", str(tmp_path / "other"))
    assert outside.returncode == 0, outside.stderr
    # A workspace without openenv in it cannot provide it: the checkout does.
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "pyproject.toml").write_text(
        '[project]\nname = "mine"\nversion = "0"\n\n[tool.uv.workspace]\nmembers = ["*"]\n'
    )
    foreign = openenv("init", "my_game", "-o", str(tmp_path / "mine"))
    assert foreign.returncode == 0, foreign.stderr
    assert "uv workspace" not in foreign.stderr

    def openenv_source(folder: Path) -> dict[str, object]:
        data = tomllib.loads((folder / "my_game" / "pyproject.toml").read_text())
        return data["tool"]["uv"]["sources"]["openenv"]

    assert openenv_source(tmp_path / "envs") == {"workspace": True}
    other, mine = tmp_path / "other" / "my_game", tmp_path / "mine" / "my_game"
    assert openenv_source(tmp_path / "other")["path"] == relative_checkout(other)
    assert openenv_source(tmp_path / "mine")["path"] == relative_checkout(mine)


def test_help_explains_the_name_and_the_output_folder() -> None:
    out = openenv("init", "--help")
    assert out.returncode == 0
    # Click's help wraps long lines, hyphenated words too ("openenv-my-" / "game").
    shown = re.sub(r"-\n\s+", "-", out.stdout)
    for text in ("NAME", "--output-dir", "snake_case", "MyGameEnv", "openenv-my-game"):
        assert text in shown


# The printed next steps, run as printed, in the two kinds of environment a user has.


def venv_beside_this_one(folder: Path, *, made_by_uv: bool) -> Path:
    """A new virtual environment that sees this one's packages (openenv, its dependencies,
    pytest) without installing them again; returns its python."""
    subprocess.run(
        [sys.executable, "-m", "venv", *(["--without-pip"] if made_by_uv else []), str(folder)],
        check=True,
        timeout=120,
    )
    python = folder / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    parent = sysconfig.get_paths()["purelib"]
    Path(purelib, "parent.pth").write_text(f"import site; site.addsitedir({parent!r})\n")
    if made_by_uv:  # what `uv venv` writes, and all that tells uv's environments apart
        with (folder / "pyvenv.cfg").open("a") as config:
            config.write("uv = 0.13.9\n")
    return python


def printed_steps(stderr: str) -> list[str]:
    lines = stderr.split("Next steps:\n", 1)[1].splitlines()
    steps = []
    for line in lines:
        if not line.startswith("  "):
            break
        steps.append(line.split("  # ", 1)[0].strip())
    return steps


def run_next_steps(steps: list[str], cwd: Path, env: dict[str, str]) -> dict[str, str]:
    """Run each step as a user would (serve in the background, on a free port); returns the
    output of each finished step."""
    assert steps[0].startswith("cd "), steps
    folder = cwd / shlex.split(steps[0])[1]
    outputs = {}
    for step in steps[1:]:
        if step.endswith(" serve"):
            continue
        out = subprocess.run(
            step, shell=True, cwd=folder, env=env, capture_output=True, text=True, timeout=300
        )
        assert out.returncode == 0, f"{step}\n{out.stdout}\n{out.stderr}"
        outputs[step] = out.stdout
    serve = next(step for step in steps if step.endswith(" serve"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [*shlex.split(serve), "--host", "127.0.0.1", "--port", str(port)],
        cwd=folder,
        env={**env, "OPENENV_LOG_LEVEL": "warning"},
        start_new_session=True,
    )
    try:
        wait_healthy(url, server)
        report = check_server(url, raise_on_failure=False)
        assert report.ok, str(report)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(30)
    return outputs


def clean_env() -> dict[str, str]:
    """This process's environment without the variables of the venv or uv run it runs in."""
    drop = {"VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT", "PYTHONPATH", "PYTEST_ADDOPTS"}
    return {k: v for k, v in os.environ.items() if k not in drop}


def init_in_new_venv(
    tmp_path: Path, made_by_uv: bool
) -> tuple[Path, Path, dict[str, str], list[str]]:
    """`openenv init my_game` run by a new venv's python: (python, work dir, env, next steps)."""
    python = venv_beside_this_one(tmp_path / "venv", made_by_uv=made_by_uv)
    work = tmp_path / "work"
    work.mkdir()
    env = clean_env()
    init = subprocess.run(
        [str(python), "-m", "openenv.cli", "init", "my_game"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert init.returncode == 0, init.stderr
    return python, work, env, printed_steps(init.stderr)


@pytest.mark.slow
@pytest.mark.timeout(600)  # a new venv, an install and a test run: minutes on a loaded machine
def test_next_steps_work_in_a_pip_venv(tmp_path: Path) -> None:
    """A venv with pip and openenv (what the README's quick start makes): the steps install
    the folder there with pip, which finds openenv already installed, and run it there."""
    python, work, env, steps = init_in_new_venv(tmp_path, made_by_uv=False)
    assert steps[0] == "cd my_game"
    assert steps[1] == f"{python} -m pip install -e '.[dev]'"
    outputs = run_next_steps(steps, work, env)
    assert re.search(r"\b4 passed\b", outputs[steps[-1]]), outputs
    installed = subprocess.run(
        [str(python), "-m", "pip", "show", "openenv-my-game"], capture_output=True, text=True
    )
    assert "Editable project location" in installed.stdout


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.skipif(shutil.which("uv") is None, reason="uv is not on PATH")
def test_next_steps_work_in_a_uv_environment(tmp_path: Path) -> None:
    """An environment made by uv (a uv checkout): `uv run` in the new folder makes its own
    environment, with openenv from this checkout (the relative path in its pyproject.toml)
    and pytest from its dev group."""
    _, work, env, steps = init_in_new_venv(tmp_path, made_by_uv=True)
    assert steps == [
        "cd my_game",
        "uv run openenv serve",
        "uv run openenv validate",
        "uv run pytest",
    ]
    outputs = run_next_steps(steps, work, env)
    assert re.search(r"\b4 passed\b", outputs["uv run pytest"]), outputs
    assert (work / "my_game" / ".venv").is_dir()
