"""`openenv init`: create a new environment folder from the template bundled with openenv.

The folder is rendered into a hidden staging folder next to the target and renamed into place
at the end, so an interrupted or failed run leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import fnmatch
import importlib.util
import json
import keyword
import os
import re
import shlex
import shutil
import sys
import tempfile
import zlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Optional

import typer
from rich.markup import escape

import openenv

from ..._install import made_by_uv
from .._output import console, fail, success

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

#: Template file (under templates/env) -> path in the new folder; `{package}`, `{key}` filled in.
#: OpenEnv's flat layout (the default): the folder is the package, its app is `server.app:app`.
FLAT_FILES: tuple[tuple[str, str], ...] = (
    ("flat/pyproject.toml.tmpl", "pyproject.toml"),
    ("flat/openenv.yaml.tmpl", "openenv.yaml"),
    ("README.md.tmpl", "README.md"),
    ("package/__init__.py.tmpl", "__init__.py"),
    ("package/models.py.tmpl", "models.py"),
    ("package/client.py.tmpl", "client.py"),
    ("package/server/__init__.py.tmpl", "server/__init__.py"),
    ("flat/app.py.tmpl", "server/app.py"),
    ("package/server/environment.py.tmpl", "server/{package}_environment.py"),
    ("tests/test_env.py.tmpl", "tests/test_{package}.py"),
)
#: The package layout (`--layout package`): the package in a folder of its own.
PACKAGE_FILES: tuple[tuple[str, str], ...] = (
    ("pyproject.toml.tmpl", "pyproject.toml"),
    ("openenv.yaml.tmpl", "openenv.yaml"),
    ("README.md.tmpl", "README.md"),
    ("package/__init__.py.tmpl", "{package}/__init__.py"),
    ("package/models.py.tmpl", "{package}/models.py"),
    ("package/client.py.tmpl", "{package}/client.py"),
    ("package/server/__init__.py.tmpl", "{package}/server/__init__.py"),
    ("package/server/app.py.tmpl", "{package}/server/app.py"),
    ("package/server/environment.py.tmpl", "{package}/server/{key}_environment.py"),
    ("tests/test_env.py.tmpl", "tests/test_{package}.py"),
)
LAYOUTS = {"flat": FLAT_FILES, "package": PACKAGE_FILES}
#: Kept for callers of the package layout's table by its old name.
FILES = PACKAGE_FILES

#: What the example game is about, for pyproject.toml, openenv.yaml, the README and /metadata.
DESCRIPTION = "Guess a secret number in as few tries as possible."
_PLACEHOLDER = re.compile(r"\{\{ *([a-z_]+) *\}\}")
_SNAKE_CASE = re.compile(r"[a-z][a-z0-9]*(_[a-z0-9]+)*")
# Package names that would hide the framework itself or the test folder from imports.
_RESERVED = {"openenv", "test", "tests"}
_EMOJIS = ("🎯", "🎲", "🧩", "🕹️", "🚀", "🧠", "🔢", "🏁")
# The colours a Hugging Face Space card accepts.
_COLORS = ("red", "yellow", "green", "blue", "indigo", "purple", "pink", "gray")


@dataclass(frozen=True)
class EnvNames:
    """Every name derived from NAME: `my_game_env` -> key `my_game`, classes `MyGame...`."""

    package: str

    @property
    def key(self) -> str:
        return self.package[: -len("_env")] if self.package.endswith("_env") else self.package

    @property
    def prefix(self) -> str:
        return "".join(word.capitalize() for word in self.key.split("_"))

    @property
    def title(self) -> str:
        return " ".join(word.capitalize() for word in self.key.split("_"))

    @property
    def dist(self) -> str:
        return "openenv-" + self.key.replace("_", "-")


def name_problem(name: str) -> Optional[str]:
    """Why `name` cannot be an environment's package name, or None when it can."""
    if not name:
        return "it is empty"
    if name[0].isdigit():
        return "a Python package name cannot start with a digit"
    if not name.isidentifier() or not name.isascii():
        return "it is not a Python identifier (use ASCII letters, digits and underscores)"
    if keyword.iskeyword(name):
        return "it is a Python keyword"
    if name != name.lower():
        return "it must be lowercase snake_case"
    if not _SNAKE_CASE.fullmatch(name):
        return "it must be snake_case: words joined by single underscores, none at either end"
    if name in _RESERVED or name in getattr(sys, "stdlib_module_names", ()):
        return f"a package named '{name}' would hide the module of the same name"
    return None


def suggest_name(name: str) -> str:
    """A valid name close to `name`, for the error message."""
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name)
    snake = re.sub(r"[^A-Za-z0-9]+", "_", snake).strip("_").lower()
    if not snake:
        return "my_env"
    if snake[0].isdigit():
        snake = "env_" + snake
    if name_problem(snake):
        snake += "_env"
    return snake if name_problem(snake) is None else "my_env"


def openenv_requirement() -> str:
    """`openenv>=X.Y,<X.(Y+1)`: pins this release line, never PyPI's unrelated `openenv`."""
    match = re.match(r"(\d+)\.(\d+)", openenv.__version__)
    major, minor = (int(match.group(1)), int(match.group(2))) if match else (0, 0)
    return f"openenv>={major}.{minor},<{major}.{minor + 1}"


def _glob_match(parts: list[str], pattern: list[str]) -> bool:
    """Path-segment glob matching as uv applies workspace member globs (`*` stays in a segment)."""
    if not pattern:
        return not parts
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        return any(_glob_match(parts[i:], rest) for i in range(len(parts) + 1))
    return bool(parts) and fnmatch.fnmatchcase(parts[0], head) and _glob_match(parts[1:], rest)


def _covers(globs: object, relative: str) -> bool:
    if not isinstance(globs, list):
        return False
    parts = relative.split("/")
    return any(
        isinstance(glob, str) and _glob_match(parts, [p for p in glob.split("/") if p != "."])
        for glob in globs
    )


def _read_pyproject(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}


def _project_name(data: dict[str, Any]) -> object:
    return data.get("project", {}).get("name")


def workspace_root(target: Path) -> Optional[Path]:
    """The uv workspace whose member globs cover `target`, if any (the nearest one decides)."""
    for parent in target.parents:
        pyproject = parent / "pyproject.toml"
        workspace = _read_pyproject(pyproject).get("tool", {}).get("uv", {}).get("workspace")
        if not isinstance(workspace, dict):
            continue
        relative = target.relative_to(parent).as_posix()
        members, excluded = workspace.get("members"), workspace.get("exclude")
        return parent if _covers(members, relative) and not _covers(excluded, relative) else None
    return None


def _workspace_has_openenv(root: Path) -> bool:
    """`openenv = { workspace = true }` only resolves when openenv is one of the packages."""
    data = _read_pyproject(root / "pyproject.toml")
    if _project_name(data) == "openenv":
        return True
    members = data.get("tool", {}).get("uv", {}).get("workspace", {}).get("members", [])
    return any(
        _project_name(_read_pyproject(folder / "pyproject.toml")) == "openenv"
        for glob in members
        if isinstance(glob, str)
        for folder in root.glob(glob)
    )


def openenv_workspace(target: Path) -> Optional[Path]:
    """The uv workspace that covers `target` and provides openenv, if any."""
    workspace = workspace_root(target)
    return workspace if workspace is not None and _workspace_has_openenv(workspace) else None


def checkout_path(target: Path) -> Optional[str]:
    """The source checkout of the running openenv, relative to `target` (None if there is none).

    Relative, so the folder can be committed and cloned elsewhere beside a clone of openenv.
    """
    from ..wheels import WheelError, openenv_source_root

    try:
        checkout = openenv_source_root()
    except WheelError:
        return None
    try:
        return Path(os.path.relpath(checkout, target)).as_posix()
    except ValueError:  # another drive on Windows: no relative path exists
        return None


def uv_sources(target: Path) -> str:
    """Where uv should take `openenv` from: the workspace, this source checkout, or the index."""
    if openenv_workspace(target) is not None:
        return "[tool.uv.sources]\nopenenv = { workspace = true }"
    path = checkout_path(target)
    if path is None:
        return ""
    quoted = json.dumps(path)  # a JSON string is a valid TOML basic string
    return f"[tool.uv.sources]\nopenenv = {{ path = {quoted}, editable = true }}"


_MODELS = ("Action", "Hint", "Observation", "State")


def _layout_values(names: EnvNames, layout: str) -> dict[str, str]:
    """What differs between the layouts: module paths and how the server imports the models."""
    prefix = names.prefix
    listed = "".join(f"    {prefix}{model},\n" for model in _MODELS)
    if layout == "flat":
        module = f"{names.package}_environment"
        imports = (
            f"try:  # installed: the package `{names.package}`\n"
            f"    from ..models import (\n{listed.replace('    ', '        ')}    )\n"
            "except ImportError:  # served from the folder, where `server` is the top package\n"
            f"    from models import (  # type: ignore[no-redef]\n"
            f"{listed.replace('    ', '        ')}    )\n"
        )
        return {
            "environment_module": module,
            "environment_imports": imports,
            "test_app": "server.app:app",
            "source_prefix": "",
        }
    return {
        "environment_module": f"{names.key}_environment",
        "environment_imports": f"from ..models import (\n{listed})\n",
        "test_app": f"{names.package}.server.app:app",
        "source_prefix": f"{names.package}/",
    }


def template_values(names: EnvNames, target: Path, layout: str = "flat") -> dict[str, str]:
    # The card's look is picked from the name, so the same name always renders the same files.
    pick = zlib.crc32(names.package.encode())
    color_from = _COLORS[pick % len(_COLORS)]
    others = [color for color in _COLORS if color != color_from]
    color_to = others[(pick // len(_COLORS)) % len(others)]
    return {
        "package": names.package,
        "key": names.key,
        "prefix": names.prefix,
        "title": names.title,
        "dist": names.dist,
        "description": DESCRIPTION,
        "openenv_requirement": openenv_requirement(),
        "uv_sources": uv_sources(target),
        "emoji": _EMOJIS[pick % len(_EMOJIS)],
        "color_from": color_from,
        "color_to": color_to,
        **_layout_values(names, layout),
    }


def render(text: str, values: dict[str, str], source: str) -> str:
    """Fill `{{ name }}` placeholders; an unknown one is a bug in the bundled template."""

    def fill(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in values:
            raise KeyError(f"template {source} uses an unknown placeholder {{{{ {key} }}}}")
        return values[key]

    return _PLACEHOLDER.sub(fill, text).rstrip("\n") + "\n"


def render_files(names: EnvNames, target: Path, layout: str = "flat") -> dict[str, str]:
    """Relative path -> text of every file of the new environment folder."""
    templates = resources.files("openenv.cli") / "templates" / "env"
    values = template_values(names, target, layout)
    files = {
        dest.format(package=names.package, key=names.key): render(
            templates.joinpath(*source.split("/")).read_text(encoding="utf-8"), values, source
        )
        for source, dest in LAYOUTS[layout]
    }
    if layout == "flat":
        # OpenEnv's layout ships its Dockerfile in server/; this one is the template's.
        from ..dockerfile import render_dockerfile

        files["server/Dockerfile"] = render_dockerfile(names.dist, names.package)
    return files


def _make_parents(folder: Path) -> list[Path]:
    """Create `folder` and missing ancestors; return those created, outermost first."""
    missing = [p for p in (folder, *folder.parents) if not p.exists()][::-1]
    folder.mkdir(parents=True, exist_ok=True)
    return missing


def write_atomically(target: Path, files: dict[str, str]) -> None:
    """Write `files` into a staging folder beside `target`, then rename it to `target`."""
    created = _make_parents(target.parent)
    staging: Optional[Path] = None
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        umask = os.umask(0)
        os.umask(umask)
        staging.chmod(0o777 & ~umask)  # mkdtemp makes it private; the result should not be
        for relative, text in files.items():
            path = staging / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(text.encode("utf-8"))  # bytes: LF line endings on every platform
        if target.is_dir():
            target.rmdir()  # checked empty before; fails safely if something appeared since
        staging.rename(target)
    except BaseException:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        for folder in reversed(created):
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise


def _check_target(target: Path) -> None:
    for folder in (target.parent, *target.parent.parents):
        if folder.exists() and not folder.is_dir():
            fail(f"{folder} is a file, not a folder.", "Pass a folder to -o.", 2)
    if target.exists() and not target.is_dir():
        fail(f"{target} exists and is a file.", "Pick another NAME or -o folder.", 2)
    if target.is_dir() and any(target.iterdir()):
        fail(
            f"{target} already exists and is not empty.",
            "Pick another NAME or -o/--output-dir, or move that folder away first.",
            2,
        )


def _on_path(name: str, path: Path) -> bool:
    found = shutil.which(name)
    return found is not None and os.path.abspath(found) == os.path.abspath(path)


def _interpreter_commands() -> tuple[str, str]:
    """How to call the Python and the `openenv` that run now, from any folder.

    Bare names when they are what the shell finds (an activated venv), else their paths:
    `python` is not on every PATH (Debian has only python3) and a venv may not be active.
    """
    python = Path(sys.executable)
    python_cmd = "python" if _on_path("python", python) else shlex.quote(str(python))
    script = shutil.which("openenv", path=str(python.parent))
    if script is not None and _on_path("openenv", Path(script)):
        return python_cmd, "openenv"
    if script is not None:
        return python_cmd, shlex.quote(script)
    return python_cmd, f"{python_cmd} -m openenv.cli"


def next_steps(target: Path) -> list[tuple[str, str]]:
    """Commands (with what each does) that install, serve, check and test the new folder.

    In an environment that uv made, with uv at hand: `uv run`, which takes openenv from the
    workspace or from the checkout named in the folder's pyproject.toml. Otherwise: install the
    folder into the running environment, where openenv already is, so that pip never looks for
    `openenv` on PyPI (a different project has that name).
    """
    python, openenv_cmd = _interpreter_commands()
    has_pip = importlib.util.find_spec("pip") is not None
    uv_knows_openenv = openenv_workspace(target) is not None or checkout_path(target) is not None
    if made_by_uv() and shutil.which("uv") is not None and uv_knows_openenv:
        return [
            ("uv run openenv serve", "serve it on http://localhost:8000"),
            ("uv run openenv validate", "check the folder follows the conventions"),
            ("uv run pytest", "run its tests (they start their own server)"),
        ]
    # pip compiles bytecode by default; uv only when asked (the server then starts faster).
    install = (
        f"{python} -m pip install"
        if has_pip
        else f"uv pip install --compile-bytecode --python {python}"
    )
    return [
        (f"{install} -e '.[dev]'", "install it and pytest beside this openenv"),
        (f"{openenv_cmd} serve", "serve it on http://localhost:8000"),
        (f"{openenv_cmd} validate", "check the folder follows the conventions"),
        (f"{python} -m pytest", "run its tests (they start their own server)"),
    ]


def _next_steps(target: Path) -> None:
    try:
        shown = os.path.relpath(target)
    except ValueError:  # another drive on Windows
        shown = str(target)
    if shown.startswith(".."):
        shown = str(target)
    steps = [(f"cd {shlex.quote(shown)}", ""), *next_steps(target)]
    width = max(len(command) for command, _ in steps) + 2
    console.print("\nNext steps:")
    for command, why in steps:
        if why:
            console.print(f"  {escape(command.ljust(width))}[dim]# {escape(why)}[/]")
        else:
            console.print(f"  {escape(command)}")
    workspace = openenv_workspace(target)
    if workspace is not None:
        console.print(
            f"It is a member of the uv workspace at {escape(str(workspace))}, "
            "which provides its openenv (`uv sync --all-packages` there installs it)."
        )


def register(app: typer.Typer) -> None:
    @app.command()
    def init(
        name: str = typer.Argument(
            ...,
            metavar="NAME",
            help="Package and folder name, lowercase snake_case such as 'my_game' or "
            "'my_game_env'. Classes are named from it without '_env' (MyGameEnv, "
            "MyGameAction, ...); the distribution is 'openenv-my-game'.",
        ),
        output_dir: Path = typer.Option(
            Path("."),
            "--output-dir",
            "-o",
            help="Folder to create NAME in (default: the current one); created if missing.",
        ),
        layout: str = typer.Option(
            "flat",
            "--layout",
            help="'flat' (OpenEnv's: models.py, client.py and server/ in the folder, app "
            "server.app:app) or 'package' (the package in NAME/NAME, app NAME.server.app:app).",
        ),
    ) -> None:
        """Create a new environment: models, client, server, tests, Dockerfile, README.

        The example game (guess a secret number) passes openenv.testing.check_env.
        Replace it with your own. OUTPUT_DIR/NAME must not exist, or must be empty.
        """
        problem = name_problem(name)
        if problem is not None:
            fail(
                f"'{name}' is not a valid environment name: {problem}.",
                f"Try `openenv init {suggest_name(name)}`.",
                code=2,
            )
        if layout not in LAYOUTS:
            fail(f"unknown --layout {layout!r}.", "Use --layout flat or --layout package.", 2)
        target = (output_dir.expanduser() / name).resolve()
        _check_target(target)
        names = EnvNames(name)
        try:
            files = render_files(names, target, layout)
            write_atomically(target, files)
        except OSError as exc:
            fail(
                f"could not create {target}: {exc}",
                "Check that the output folder is writable; nothing was left behind.",
            )
        success(f"Created {names.title} ({names.dist}) in {target}")
        _next_steps(target)
        typer.echo(str(target))
