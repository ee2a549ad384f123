"""`openenv skills`: the skill document stays true, and `add` writes the files and links.

The document's Python snippets are checked for real: every one compiles, and the ones marked
`runnable` are written into folders made by `openenv init` (file snippets, `# file: PATH`) or
run as scripts against those folders served by `openenv serve` (the others), with each
`# prints: X` comment checked against the output. Every `openenv ...` command it shows must
exist with the flags it uses.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from openenv.cli.__main__ import app as openenv_cli
from tests.support.server import REPO, free_port, stop_process, wait_healthy

OPENENV = str(Path(sys.executable).with_name("openenv"))
SKILL = REPO / "src" / "openenv" / "cli" / "skills" / "openenv-cli" / "SKILL.md"
TEXT = SKILL.read_text(encoding="utf-8")
_BLOCK = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.S | re.M)
_FILE = re.compile(r"\A# file: (\S+)\n")
_PRINTS = re.compile(r"#\s*prints:\s*(.+?)\s*$", re.M)
#: As `cli()` runs commands: wide, plain help text.
HELP_ENV = {"COLUMNS": "200", "NO_COLOR": "1"}


def blocks(language: str) -> list[tuple[str, str]]:
    """(info string, code) of each fenced block whose info string starts with `language`."""
    return [
        (info.strip(), code)
        for info, code in _BLOCK.findall(TEXT)
        if info.strip().split(" ")[0] == language
    ]


def runnable() -> list[str]:
    return [code for info, code in blocks("python") if "runnable" in info.split()]


def cli(*args: str, cwd: Path, home: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOME": str(home), "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run(
        [OPENENV, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


# -- the document ----------------------------------------------------------------------------


def test_front_matter_names_and_describes_the_skill() -> None:
    assert TEXT.startswith("---\n")
    meta = yaml.safe_load(TEXT.split("---\n", 2)[1])
    assert meta["name"] == "openenv-cli" == SKILL.parent.name  # agents require the folder name
    assert re.fullmatch(r"[a-z0-9-]{1,64}", meta["name"])
    assert 100 < len(meta["description"]) <= 1024
    assert "Use it when" in meta["description"]


def test_every_python_snippet_compiles() -> None:
    snippets = blocks("python")
    assert len(snippets) >= 12
    for _, code in snippets:
        ast.parse(code)  # raises on a syntax error
    assert len(runnable()) >= 10


def _commands() -> list[list[str]]:
    """Each `openenv ...` command shown in a bash block or an inline code span."""
    lines = [
        line.split("#", 1)[0].strip()
        for _, code in blocks("bash")
        for line in code.splitlines()
        if line.strip().startswith("openenv ")
    ]
    lines += re.findall(r"`(openenv [^`]+)`", TEXT)
    return [line.split()[1:] for line in lines]


def _prose_flags() -> list[tuple[set[str], list[str]]]:
    """(commands, flags): flags shown as `--flag` in a paragraph or bullet about `openenv X`."""
    body = _BLOCK.sub("", TEXT)
    found = []
    for part in re.split(r"\n\s*\n|\n(?=- )", body):
        commands = set(re.findall(r"`openenv (\w+)", part))
        spans = [span.split()[0] for span in re.findall(r"`(-[^`]+)`", part)]
        flags = [flag for span in spans for flag in span.split("/") if flag.startswith("-")]
        if commands and flags:
            found.append((commands, flags))
    return found


def test_every_cli_command_and_flag_shown_exists(tmp_path: Path) -> None:
    helps: dict[tuple[str, ...], str] = {}

    runner = CliRunner()

    def help_of(path: tuple[str, ...]) -> str:
        # In this process: the help text is the point here, not the interpreter start-up.
        if path not in helps:
            out = runner.invoke(openenv_cli, [*path, "--help"], env=HELP_ENV)
            assert out.exit_code == 0, (path, out.output)
            helps[path] = out.stdout
        return helps[path]

    def has(flag: str, path: tuple[str, ...]) -> bool:
        flag = flag.split("=", 1)[0]
        return bool(re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help_of(path)))

    commands = _commands()
    assert len(commands) >= 10
    for words in commands:
        path = tuple(w for w in words[:2] if not w.startswith("-") and w.isidentifier())
        if path and path[0] != "skills":
            path = path[:1]
        for word in words:
            if word.startswith("-"):
                assert has(word, path), f"`openenv {' '.join(words)}`: {word} is not an option"
    prose = _prose_flags()
    assert sum(len(flags) for _, flags in prose) >= 15
    for names, flags in prose:
        for flag in flags:
            assert any(has(flag, (name,)) for name in names), f"{flag} of openenv {names}"


@contextmanager
def serving(folder: Path, port: int, home: Path) -> Iterator[str]:
    """`openenv serve --port PORT` in `folder`, as the document says to run it."""
    env = {**os.environ, "HOME": str(home), "OPENENV_LOG_LEVEL": "warning"}
    process = subprocess.Popen(
        [OPENENV, "serve", "--host", "127.0.0.1", "--port", str(port)], cwd=folder, env=env
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process)
        yield url
    finally:
        stop_process(process)


def _expected_prints(code: str) -> list[str]:
    return [match.strip() for match in _PRINTS.findall(code)]


def _in_order(expected: list[str], lines: list[str]) -> bool:
    found = iter(lines)
    return all(any(line.strip() == want for line in found) for want in expected)


def test_runnable_snippets_work_in_generated_folders(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    for name in ("reverse_env", "notes_env"):
        out = cli("init", name, "--layout", "package", cwd=tmp_path, home=home)
        assert out.returncode == 0, out.stderr

    # Write the file snippets into the folders, as the document lays them out.
    scripts: list[str] = []
    current = None
    for code in runnable():
        match = _FILE.match(code)
        if match is None:
            scripts.append(code)
            continue
        relative = Path(match.group(1))
        if (tmp_path / relative.parts[0]).is_dir():
            current = tmp_path / relative.parts[0]  # `reverse_env/models.py`: that folder
        assert current is not None, relative
        (current / relative).write_text(code, encoding="utf-8")
    assert len(scripts) >= 4

    # What the document says to do to make notes_env an MCP environment.
    notes = tmp_path / "notes_env"
    (notes / "notes_env" / "models.py").unlink()
    manifest = yaml.safe_load((notes / "openenv.yaml").read_text())
    manifest["action"] = "openenv.core.env_server.mcp_types:CallToolAction"
    manifest["observation"] = "openenv.core.env_server.mcp_types:CallToolObservation"
    (notes / "openenv.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    (notes / "tests" / "test_notes_env.py").unlink()  # the generated tests are the game's

    reverse = tmp_path / "reverse_env"
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=reverse,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "2 passed" in tests.stdout

    with ExitStack() as stack:
        urls = {
            8000: stack.enter_context(serving(reverse, free_port(), home)),
            8001: stack.enter_context(serving(notes, free_port(), home)),
        }
        env = {
            **os.environ,
            "HOME": str(home),
            "PYTHONPATH": os.pathsep.join([str(reverse), str(notes)]),
        }
        for index, code in enumerate(scripts):
            for port, url in urls.items():
                code = code.replace(f"http://localhost:{port}", url)
            script = tmp_path / f"snippet_{index}.py"
            script.write_text(code, encoding="utf-8")
            run = subprocess.run(
                [sys.executable, str(script)],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert run.returncode == 0, f"snippet {index}:\n{code}\n{run.stderr}"
            expected = _expected_prints(code)
            assert _in_order(expected, run.stdout.splitlines()), (
                f"snippet {index} printed:\n{run.stdout}\nexpected, in order: {expected}"
            )
        # Both environments pass `openenv validate` over the wire.
        for url in urls.values():
            checked = cli("validate", url, cwd=tmp_path, home=home)
            assert checked.returncode == 0, checked.stdout + checked.stderr
    # The MCP conversion leaves a folder that follows the conventions.
    layout = cli("validate", str(notes), "--no-run", cwd=tmp_path, home=home)
    assert layout.returncode == 0, layout.stdout + layout.stderr


# -- skills preview / add -------------------------------------------------------------------


def test_preview_prints_the_document(tmp_path: Path) -> None:
    out = cli("skills", "preview", cwd=tmp_path, home=tmp_path)
    assert out.returncode == 0
    assert out.stdout == TEXT


def _assert_linked(link: Path, central: Path) -> None:
    assert link.is_symlink(), link
    target = os.readlink(link)
    assert not os.path.isabs(target), target  # relative: the folder can move
    assert link.resolve() == central.resolve()
    assert (link / "SKILL.md").read_text(encoding="utf-8") == TEXT


def test_add_in_a_project_links_each_agent(tmp_path: Path) -> None:
    project, home = tmp_path / "project", tmp_path / "home"
    project.mkdir()
    home.mkdir()
    out = cli(
        "skills", "add", "--claude", "--codex", "--cursor", "--opencode", cwd=project, home=home
    )
    assert out.returncode == 0, out.stderr
    central = project / ".agents" / "skills" / "openenv-cli"
    assert (central / "SKILL.md").read_text(encoding="utf-8") == TEXT
    for agent in (".claude", ".codex", ".cursor", ".opencode"):
        _assert_linked(project / agent / "skills" / "openenv-cli", central)
    assert not any(home.iterdir())  # nothing outside the project
    assert str(central / "SKILL.md") in out.stdout


def test_add_without_agents_writes_only_the_shared_copy(tmp_path: Path) -> None:
    out = cli("skills", "add", cwd=tmp_path, home=tmp_path / "home")
    assert out.returncode == 0, out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [".agents"]
    assert (tmp_path / ".agents" / "skills" / "openenv-cli" / "SKILL.md").is_file()
    assert "--claude" in out.stderr  # says how to link it


def test_add_global_uses_the_home_folder(tmp_path: Path) -> None:
    project, home = tmp_path / "project", tmp_path / "home"
    project.mkdir()
    home.mkdir()
    out = cli("skills", "add", "-g", "--claude", "--opencode", cwd=project, home=home)
    assert out.returncode == 0, out.stderr
    central = home / ".agents" / "skills" / "openenv-cli"
    _assert_linked(home / ".claude" / "skills" / "openenv-cli", central)
    _assert_linked(home / ".config" / "opencode" / "skills" / "openenv-cli", central)
    assert not (home / ".opencode").exists()
    assert not any(project.iterdir())


def test_an_installed_skill_is_replaced_only_with_force(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert cli("skills", "add", "--claude", cwd=tmp_path, home=home).returncode == 0
    skill = tmp_path / ".agents" / "skills" / "openenv-cli" / "SKILL.md"
    skill.write_text("edited\n")
    again = cli("skills", "add", "--claude", cwd=tmp_path, home=home)
    assert again.returncode == 1
    assert "already installed" in again.stderr and "--force" in again.stderr
    assert skill.read_text() == "edited\n"  # untouched
    # A real folder where the link goes is in the way too.
    (tmp_path / ".cursor" / "skills" / "openenv-cli").mkdir(parents=True)
    blocked = cli("skills", "add", "--cursor", cwd=tmp_path, home=home)
    assert blocked.returncode == 1
    forced = cli("skills", "add", "--claude", "--cursor", "--force", cwd=tmp_path, home=home)
    assert forced.returncode == 0, forced.stderr
    assert skill.read_text(encoding="utf-8") == TEXT
    _assert_linked(tmp_path / ".cursor" / "skills" / "openenv-cli", skill.parent)


def test_dest_writes_directly_and_refuses_agent_flags(tmp_path: Path) -> None:
    dest = tmp_path / "agent-skills"
    out = cli("skills", "add", "--dest", str(dest), cwd=tmp_path, home=tmp_path / "home")
    assert out.returncode == 0, out.stderr
    written = dest / "openenv-cli" / "SKILL.md"  # the folder OpenEnv writes too
    assert not written.parent.is_symlink()
    assert written.read_text(encoding="utf-8") == TEXT
    assert not (tmp_path / ".agents").exists()
    for flag in ("--claude", "--global"):
        refused = cli("skills", "add", "--dest", str(dest), flag, cwd=tmp_path, home=tmp_path)
        assert refused.returncode == 2
        assert "--dest cannot be combined" in refused.stderr


@pytest.mark.parametrize("args", [["skills", "add", "--unknown"], ["skills", "nope"]])
def test_usage_errors(tmp_path: Path, args: list[str]) -> None:
    out = cli(*args, cwd=tmp_path, home=tmp_path)
    assert out.returncode == 2
