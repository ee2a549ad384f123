"""How to install something into the running interpreter, said the way its user can run it.

Hints name commands that work where they are printed: `pip` through the running interpreter
(an inactive venv's `pip` is not on PATH, and Debian's system pip refuses installs, PEP 668),
`uv pip` for an environment without pip (uv makes those), and paths to this source checkout
rather than package names: the environments are not on PyPI (and PyPI's `openenv` is a
different project).
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Optional


def source_checkout() -> Optional[Path]:
    """The source checkout the running `openenv` comes from (None when installed from a wheel)."""
    import openenv

    package = Path(openenv.__file__).resolve().parent
    for candidate in (package.parent.parent, package.parent):
        pyproject = candidate / "pyproject.toml"
        try:
            if 'name = "openenv"' in pyproject.read_text(encoding="utf-8"):
                return candidate
        except OSError:
            continue
    return None


def checkout_env_folder(key: str) -> Optional[Path]:
    """`envs/<key>_env` of the source checkout, if there is one with that folder."""
    checkout = source_checkout()
    if checkout is None:
        return None
    folder = checkout / "envs" / f"{key}_env"
    return folder if (folder / "pyproject.toml").is_file() else None


def checkout_env_keys() -> list[str]:
    """The environments in the source checkout's `envs/` folder (none without a checkout)."""
    checkout = source_checkout()
    if checkout is None:
        return []
    return sorted(
        folder.name[: -len("_env")]
        for folder in (checkout / "envs").glob("*_env")
        if (folder / "pyproject.toml").is_file()
    )


def shown_path(path: Path) -> str:
    """`path` as typed from the current folder: `./envs/x_env` below it, else absolute."""
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return shlex.quote(str(path))
    if relative.startswith(".."):
        return shlex.quote(str(path))
    return shlex.quote(relative if relative.startswith(".") else f"./{relative}")


def python_command() -> str:
    """The running interpreter as typed: `python` when that is what PATH finds, else its path."""
    python = Path(sys.executable)
    found = shutil.which("python")
    if found is not None and os.path.dirname(os.path.abspath(found)) == str(
        python.absolute().parent
    ):
        return "python"
    try:
        relative = os.path.relpath(python)
    except ValueError:
        relative = ".."
    if not relative.startswith("..") and len(relative) < len(str(python)):
        return shlex.quote(relative)
    return shlex.quote(str(python))


def made_by_uv() -> bool:
    """Whether uv made the running environment (its pyvenv.cfg says so)."""
    try:
        config = (Path(sys.prefix) / "pyvenv.cfg").read_text(encoding="utf-8")
    except OSError:
        return False
    return any(line.partition("=")[0].strip() == "uv" for line in config.splitlines())


def uses_uv() -> bool:
    """Whether this user works with uv: it is on PATH, or it made the running environment."""
    return shutil.which("uv") is not None or made_by_uv()


def has_pip() -> bool:
    """Whether the running interpreter can run `-m pip` (uv's environments have no pip)."""
    return importlib.util.find_spec("pip") is not None


def pip_install() -> str:
    """The command that installs into the running interpreter (then the packages to install).

    `<python> -m pip install` when it has pip; `uv pip install --python <python>` when it has
    none (uv made it) and uv is on PATH.
    """
    python = python_command()
    if not has_pip() and shutil.which("uv") is not None:
        return f"uv pip install --python {python}"
    return f"{python} -m pip install"


def install_env_hint(key: str) -> str:
    """How to install environment `key`: from the checkout's folder when it has one."""
    folder = checkout_env_folder(key)
    if folder is not None:
        return f"`{pip_install()} -e {shown_path(folder)}`"
    dist = "openenv-" + key.replace("_", "-")
    return (
        f"`{pip_install()} -e PATH/TO/{key}_env` from the folder of the package that provides "
        f"it (its distribution is named {dist}; this repository's environments are in its "
        "envs/ folder, none is on PyPI)"
    )
