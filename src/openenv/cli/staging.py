"""The folder `openenv push` uploads as a Hugging Face Docker Space.

A real push and `--dry-run` share this code, so the folder a user inspects after a dry run is
byte for byte what the Space would get. Staging never touches the Hub and never sees secrets.

What changes on the way from the environment folder to the Space:

- the Dockerfile (generated from the template unless the environment ships its own) is
  written at the root and builds from a base image the Space builder can pull;
  pip may use PyPI there for third-party dependencies, but installs `openenv` and the
  environment from `wheels/` by file name (the `openenv` on PyPI is a different project);
- `wheels/` holds the wheels of this checkout's `openenv` and of the environment;
- README.md gets the front matter a Docker Space needs (sdk, app_port, tags).
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Optional

import yaml

from openenv.core.manifest import EnvProject, split_front_matter

from .dockerfile import project_dockerfile

#: Default base image of a Space: the Hub's builder pulls it from Docker Hub.
SPACE_BASE_IMAGE = "python:3.11-slim"
WHEELS_DIR = "wheels"
#: Where the generated Dockerfile copies `wheels/` in the image.
IMAGE_WHEELS_DIR = "/tmp/wheels"
INTERFACE_ENV = "ENABLE_WEB_INTERFACE"
WEB_BASE_PATH = "/web"

#: Skipped at any depth (dot-files and dot-folders are skipped too).
_SKIP_NAMES = frozenset({".venv", "__pycache__"})
#: Skipped at the root only: build output, and `wheels/`, which staging writes itself.
_SKIP_ROOT = frozenset({"build", "dist", WHEELS_DIR})

WheelBuilder = Callable[[EnvProject, Path], list[Path]]


class StagingError(ValueError):
    """The environment folder cannot be staged; the message says what to fix."""


@dataclass
class StagedSpace:
    """A staged Space folder and what the user should know about it."""

    root: Path
    files: list[str]
    wheels: list[str]
    notes: list[str] = field(default_factory=list)


# -- exclude patterns ----------------------------------------------------------------------


def read_exclude_file(path: Path) -> list[str]:
    """Patterns from an exclude file: one per line, `#` comments and blank lines ignored.

    Negations (`!pattern`) are not supported and are refused rather than silently ignored,
    since ignoring one would upload a file the user meant to keep back (or the reverse).
    """
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise StagingError(f"cannot read the exclude file {path}: {exc.strerror or exc}") from None
    patterns = []
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("!"):
            raise StagingError(
                f"{path}:{number}: negated patterns ('{line}') are not supported; "
                "list only what to leave out"
            )
        patterns.append(line)
    return patterns


def is_excluded(relative: PurePosixPath, is_dir: bool, patterns: Iterable[str]) -> bool:
    """gitignore-style matching of a path relative to the environment root.

    `name` matches a file or folder of that name at any depth, `dir/` only folders, a pattern
    with a `/` inside (or a leading one) matches the path from the root; `*` and `?` are globs.
    """
    text = relative.as_posix()
    for pattern in patterns:
        dir_only = pattern.endswith("/")
        body = pattern.rstrip("/")
        if not body or (dir_only and not is_dir):
            continue
        if body.startswith("**/"):  # any depth, the root included
            body = body[3:]
        if "/" in body:
            if fnmatch.fnmatchcase(text, body.lstrip("/")):
                return True
        elif fnmatch.fnmatchcase(relative.name, body):
            return True
    return False


def _skipped(relative: PurePosixPath, is_dir: bool, patterns: Sequence[str]) -> bool:
    name = relative.name
    if name.startswith(".") or name in _SKIP_NAMES or name.endswith((".pyc", ".egg-info")):
        return True
    if len(relative.parts) == 1 and is_dir and name in _SKIP_ROOT:
        return True
    return is_excluded(relative, is_dir, patterns)


def copy_environment(project: EnvProject, dest: Path, patterns: Sequence[str]) -> list[str]:
    """Copy the environment's own files to `dest`, skipping build output and excluded paths.

    Returns notes for the user (symlinked folders are not followed). The environment's
    Dockerfile and README.md are left out: staging writes the Space's versions of them.
    """
    notes = []
    root = project.root
    generated = {PurePosixPath("README.md")}
    if project.dockerfile is not None:
        generated.add(PurePosixPath(project.dockerfile.relative_to(root).as_posix()))
    for current, dirnames, filenames in os.walk(root):
        here = Path(current)
        rel_here = PurePosixPath(here.relative_to(root).as_posix())
        kept = []
        for name in sorted(dirnames):
            rel = rel_here / name
            if _skipped(rel, True, patterns):
                continue
            if (here / name).is_symlink():
                notes.append(f"{rel}/ is a symbolic link to a folder and was not uploaded")
                continue
            kept.append(name)
        dirnames[:] = kept
        for name in sorted(filenames):
            rel = rel_here / name
            if rel in generated or _skipped(rel, False, patterns):
                continue
            source = here / name
            if not source.exists():  # a dangling symlink
                notes.append(f"{rel} is a broken symbolic link and was not uploaded")
                continue
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return notes


# -- Dockerfile ------------------------------------------------------------------------------

SPACE_DOCKERFILE_HEADER = """\
# Staged by `openenv push` for a Hugging Face Docker Space: the base image comes from Docker Hub,
# pip may reach PyPI for third-party dependencies, and openenv and this environment are
# installed from the wheel files in ./wheels (the `openenv` on PyPI is another project).
"""
_ARG_BASE = re.compile(r"^(\s*ARG\s+BASE_IMAGE)(?:=\S*)?[ \t]*$", re.M | re.I)
_ARG_NO_INDEX = re.compile(r"^(\s*ARG\s+PIP_NO_INDEX)=1[ \t]*$", re.M | re.I)
_FIRST_FROM = re.compile(r"^(\s*FROM\s+(?:--\S+\s+)*)(\S+)", re.M | re.I)


def _instructions(text: str) -> list[tuple[int, str]]:
    """(first line index, keyword) of each instruction, continuation lines joined."""
    found = []
    continued = False
    for index, line in enumerate(text.splitlines()):
        stripped = line.strip()
        if continued and (not stripped or stripped.startswith("#")):
            continue  # blank and comment lines inside an instruction do not end it
        if not continued and stripped and not stripped.startswith("#"):
            found.append((index, stripped.split(None, 1)[0].upper()))
        continued = stripped.endswith("\\")
    return found


def space_dockerfile(
    text: str,
    *,
    dist_name: str,
    base_image: Optional[str] = None,
    interface: bool = True,
    port: Optional[int] = None,
) -> tuple[str, list[str]]:
    """The Dockerfile for the Space, and notes on anything that may stop the Space building.

    `base_image` None means the default Space base image for `ARG BASE_IMAGE`; given, it also
    replaces the first FROM of a Dockerfile that has no such ARG.
    """
    notes = []
    image = base_image or SPACE_BASE_IMAGE
    text, replaced = _ARG_BASE.subn(lambda m: f"{m.group(1)}={image}", text)
    if not replaced:
        if base_image is not None:
            text, replaced = _FIRST_FROM.subn(lambda m: f"{m.group(1)}{image}", text, count=1)
        if not replaced:
            notes.append(
                "the Dockerfile has no `ARG BASE_IMAGE=`: its FROM lines are kept as they are"
            )
    text = _ARG_NO_INDEX.sub(r"\g<1>=0", text)
    # Name the wheel files so that pip takes them for `openenv` and the environment, never
    # the unrelated `openenv` from PyPI, now that the index is reachable.
    install = re.compile(
        rf"(--find-links[ =]{re.escape(IMAGE_WHEELS_DIR)}\s+){re.escape(dist_name)}(?=\s|$)"
    )
    text, pinned = install.subn(rf"\g<1>{IMAGE_WHEELS_DIR}/*.whl", text)
    if not pinned:
        notes.append(
            "the Dockerfile does not install from ./wheels the way `openenv init` writes it "
            f"(`--find-links {IMAGE_WHEELS_DIR} {dist_name}`): the Space may install the "
            "unrelated `openenv` from PyPI, or fail to build"
        )
    if interface and not re.search(rf"^\s*ENV\s.*\b{INTERFACE_ENV}\b", text, re.M):
        lines = text.splitlines()
        cmds = [index for index, keyword in _instructions(text) if keyword == "CMD"]
        env_line = f"ENV {INTERFACE_ENV}=true"
        if cmds:
            at = cmds[-1]
            while at > 0 and lines[at - 1].lstrip().startswith("#"):
                at -= 1  # keep the CMD's own comment next to it
            lines.insert(at, env_line)
        else:
            lines.append(env_line)
        text = "\n".join(lines) + "\n"
    if port is not None:
        exposed = re.findall(r"^\s*EXPOSE\s+(\d+)", text, re.M | re.I)
        if exposed and str(port) not in exposed:
            notes.append(
                f"the Dockerfile exposes port {', '.join(exposed)} but openenv.yaml says "
                f"{port}: the Space (app_port {port}) will not reach the server"
            )
    return SPACE_DOCKERFILE_HEADER + text, notes


# -- README front matter -----------------------------------------------------------------


def space_readme(
    text: str, *, name: str, port: int, interface: bool = True, description: Optional[str] = None
) -> str:
    """README.md with the front matter a Docker Space needs; the body is kept as it is."""
    try:
        data, body = split_front_matter(text)
    except ValueError as exc:
        raise StagingError(
            f"README.md: {exc}; fix it, or delete the block between the '---' lines and a "
            "valid one will be written"
        ) from None
    if data is None:
        data = {
            "title": name.removesuffix("_env").replace("_", " ").title() or name,
            "emoji": "🤖",
            "colorFrom": "blue",
            "colorTo": "green",
            "pinned": False,
        }
        if description and len(description) <= 60:  # the Hub's limit for short_description
            data["short_description"] = description
        body = "\n" + text
    data["sdk"] = "docker"
    data["app_port"] = port
    tags = data.get("tags") or []
    tags = [tags] if isinstance(tags, str) else [str(tag) for tag in tags]
    if "openenv" not in tags:
        tags.append("openenv")
    data["tags"] = tags
    if interface:
        data["base_path"] = WEB_BASE_PATH
    elif data.get("base_path") == WEB_BASE_PATH:
        del data["base_path"]
    front = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, default_flow_style=False)
    return f"---\n{front}---\n{body}"


# -- the whole folder ------------------------------------------------------------------------


def _default_wheels(project: EnvProject, dest: Path) -> list[Path]:
    from .wheels import build_project_wheels

    return build_project_wheels(project, dest)


def stage_space(
    project: EnvProject,
    dest: Path,
    *,
    base_image: Optional[str] = None,
    interface: bool = True,
    exclude: Sequence[str] = (),
    build_wheels: WheelBuilder = _default_wheels,
) -> StagedSpace:
    """Write the Space's files for `project` into `dest` (a new or empty folder)."""
    dest = Path(dest).resolve()
    if dest == project.root or project.root in dest.parents:
        raise StagingError(
            f"the staging folder {dest} is inside the environment folder; choose one outside it"
        )
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise StagingError(f"the staging folder {dest} exists and is not empty")
    dest.mkdir(parents=True, exist_ok=True)

    notes = copy_environment(project, dest, exclude)

    manifest = project.manifest
    dockerfile, docker_notes = space_dockerfile(
        project_dockerfile(project),
        dist_name=project.dist_name,
        base_image=base_image,
        interface=interface,
        port=manifest.port,
    )
    notes.extend(docker_notes)
    (dest / "Dockerfile").write_text(dockerfile, encoding="utf-8")

    readme_path = project.root / "README.md"
    readme = ""
    if not readme_path.is_file():
        notes.append("no README.md in the environment: a minimal one is written")
    elif not is_excluded(PurePosixPath("README.md"), False, exclude):
        readme = readme_path.read_text(encoding="utf-8")
    if not readme.strip():
        readme = f"# {manifest.name}\n\n{manifest.description or ''}".rstrip() + "\n"
    (dest / "README.md").write_text(
        space_readme(
            readme,
            name=manifest.name,
            port=manifest.port,
            interface=interface,
            description=manifest.description,
        ),
        encoding="utf-8",
    )

    wheels = build_wheels(project, dest / WHEELS_DIR)
    files = sorted(path.relative_to(dest).as_posix() for path in dest.rglob("*") if path.is_file())
    return StagedSpace(
        root=dest, files=files, wheels=sorted(path.name for path in wheels), notes=notes
    )
