"""`openenv skills`: install the openenv skill (SKILL.md) for coding agents.

One copy lives in `.agents/skills/openenv-cli/` (of the project, or of the home folder with
`--global`) and each agent's skills folder links to it, so updating the skill updates every
agent; the folders are the ones OpenEnv's `openenv skills add` uses. The document ships with
openenv (`openenv/cli/skills/openenv-cli/SKILL.md`).
"""

from __future__ import annotations

import os
import shutil
from importlib import resources
from pathlib import Path
from typing import Optional

import typer

from .._output import console, fail, success, warn

SKILL_NAME = "openenv-cli"
SKILL_FILE = "SKILL.md"
#: The shared copy, relative to the project or the home folder.
CENTRAL_DIR = Path(".agents") / "skills"
#: Agent flag -> (skills folder in a project, skills folder under the home folder).
AGENT_DIRS: dict[str, tuple[Path, Path]] = {
    "claude": (Path(".claude/skills"), Path(".claude/skills")),
    "codex": (Path(".codex/skills"), Path(".codex/skills")),
    "cursor": (Path(".cursor/skills"), Path(".cursor/skills")),
    "opencode": (Path(".opencode/skills"), Path(".config/opencode/skills")),
}


def skill_text() -> str:
    """The skill document bundled with this openenv."""
    source = resources.files("openenv.cli") / "skills" / SKILL_NAME / SKILL_FILE
    return source.read_text(encoding="utf-8")


def _exists(path: Path) -> bool:
    return path.exists() or path.is_symlink()  # a dangling link is in the way too


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def _link(link: Path, target: Path) -> str:
    """A relative symlink `link` -> `target` (a copy where links are not allowed)."""
    link.parent.mkdir(parents=True, exist_ok=True)
    try:
        link.symlink_to(os.path.relpath(target, link.parent), target_is_directory=True)
        return str(link)
    except OSError as exc:  # e.g. Windows without the privilege to make symlinks
        shutil.copytree(target, link)
        warn(f"could not link {link} ({exc}); copied it instead")
        return str(link)


def install(
    *, base: Optional[Path], agents: list[str], dest: Optional[Path], global_: bool, force: bool
) -> list[str]:
    """Write the skill and its links; returns what was written, for stdout."""
    if dest is not None:
        central = dest.expanduser().resolve() / SKILL_NAME
        links: list[Path] = []
    else:
        assert base is not None
        central = base / CENTRAL_DIR / SKILL_NAME
        index = 1 if global_ else 0
        links = [base / AGENT_DIRS[agent][index] / SKILL_NAME for agent in agents]
    targets = [central, *links]
    taken = [path for path in targets if _exists(path)]
    if taken and not force:
        fail(
            "the openenv skill is already installed at " + ", ".join(str(p) for p in taken),
            "Pass --force to replace it.",
        )
    for path in taken:
        _remove(path)
    central.mkdir(parents=True, exist_ok=True)
    (central / SKILL_FILE).write_text(skill_text(), encoding="utf-8")
    written = [str(central / SKILL_FILE)]
    written += [_link(link, central) for link in links]
    return written


def register(app: typer.Typer) -> None:
    """Add the `skills` command group to the app."""
    skills = typer.Typer(
        help="Teach coding agents to build and use openenv environments (SKILL.md).",
        no_args_is_help=True,
    )

    @skills.command()
    def preview() -> None:
        """Print the skill document."""
        typer.echo(skill_text(), nl=False)

    @skills.command()
    def add(
        claude: bool = typer.Option(False, "--claude", help="Link it for Claude Code."),
        codex: bool = typer.Option(False, "--codex", help="Link it for Codex."),
        cursor: bool = typer.Option(False, "--cursor", help="Link it for Cursor."),
        opencode: bool = typer.Option(False, "--opencode", help="Link it for OpenCode."),
        global_: bool = typer.Option(
            False,
            "--global",
            "-g",
            help="Install in your home folder (~/.agents/skills) instead of this project.",
        ),
        dest: Optional[Path] = typer.Option(
            None,
            "--dest",
            help="Skills folder to write openenv-cli/SKILL.md into directly, with no shared copy "
            "and no links (e.g. ~/.claude/skills).",
        ),
        force: bool = typer.Option(False, "--force", help="Replace an installed skill."),
    ) -> None:
        """Install the skill in .agents/skills/openenv-cli and link it from each agent's skills."""
        chosen = [
            name
            for name, flag in (
                ("claude", claude),
                ("codex", codex),
                ("cursor", cursor),
                ("opencode", opencode),
            )
            if flag
        ]
        if dest is not None and (chosen or global_):
            given = [f"--{name}" for name in chosen] + (["--global"] if global_ else [])
            fail(
                f"--dest cannot be combined with {', '.join(given)}",
                "--dest writes one copy where you say; the agent flags link the shared copy.",
                code=2,
            )
        base = None if dest is not None else (Path.home() if global_ else Path.cwd())
        try:
            written = install(base=base, agents=chosen, dest=dest, global_=global_, force=force)
        except OSError as exc:
            fail(f"could not install the skill: {exc}", "Check that the folder is writable.")
        where = "your home folder" if global_ else (str(dest) if dest else "this project")
        success(f"Installed the openenv skill in {where}")
        if dest is None and not chosen:
            console.print("Link it for your agent with --claude, --codex, --cursor or --opencode.")
        for line in written:
            typer.echo(line)

    app.add_typer(skills, name="skills")
