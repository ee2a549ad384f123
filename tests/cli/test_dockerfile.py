"""The Dockerfile template: generated into every staged build context and Space, overridable by
an environment that ships its own, and in step with the environment servers' command line."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pytest

from openenv.cli.commands.build import stage_files
from openenv.cli.dockerfile import render_dockerfile
from openenv.cli.staging import stage_space
from openenv.core.env_server.runner import server_parser
from openenv.core.manifest import load_project
from tests.support.server import REPO

ENVS = sorted(path for path in (REPO / "envs").iterdir() if (path / "openenv.yaml").is_file())
CUSTOM = "FROM scratch\n# this environment's own Dockerfile\n"


def template_for(env_dir: Path) -> str:
    project = load_project(env_dir)
    return render_dockerfile(project.dist_name, project.package, port=project.manifest.port)


def no_wheels(project: object, dest: Path) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    return []


@pytest.mark.parametrize("env_dir", ENVS, ids=lambda path: path.name)
def test_no_environment_keeps_a_copy_of_the_template(env_dir: Path) -> None:
    own = load_project(env_dir).dockerfile
    # An override is allowed; a copy of the template is a copy that drifts when it changes.
    assert own is None or own.read_text() != template_for(env_dir), (
        f"delete {own}: `openenv build` generates it from the template"
    )


@pytest.mark.parametrize("env_dir", ENVS, ids=lambda path: path.name)
def test_the_template_command_is_one_the_environment_server_accepts(env_dir: Path) -> None:
    project = load_project(env_dir)
    cmd = next(line for line in template_for(env_dir).splitlines() if line.startswith("CMD "))
    argv = shlex.split(cmd[len("CMD ") :].strip("[]").replace(",", " "))
    boot = ["python", "-m", "openenv.core.env_server.boot"]
    assert argv[:4] == [*boot, f"{project.package}.server.app"]
    assert f"{project.package}.server.app:main" in project.scripts.values()
    args = server_parser(project.manifest.app).parse_args(argv[4:])
    assert (args.host, args.port) == ("0.0.0.0", project.manifest.port)


def test_build_context_gets_the_template(tmp_path: Path) -> None:
    env_dir = REPO / "envs" / "grid_world_env"
    dockerfile = stage_files(load_project(env_dir), tmp_path / "context")
    assert dockerfile == tmp_path / "context" / "Dockerfile"
    assert dockerfile.read_text() == template_for(env_dir)
    assert (tmp_path / "context" / "grid_world_env" / "server" / "app.py").is_file()
    assert not (tmp_path / "context" / ".venv").exists()


@pytest.mark.parametrize("where", ["Dockerfile", "server/Dockerfile"])
def test_an_environment_dockerfile_overrides_the_template(tmp_path: Path, where: str) -> None:
    env_dir = tmp_path / "maze_env"
    shutil.copytree(REPO / "envs" / "maze_env", env_dir, ignore=shutil.ignore_patterns(".venv"))
    (env_dir / where).parent.mkdir(exist_ok=True)
    (env_dir / where).write_text(CUSTOM)
    project = load_project(env_dir)
    assert stage_files(project, tmp_path / "context").read_text() == CUSTOM
    staged = stage_space(project, tmp_path / "space", build_wheels=no_wheels)
    assert "# this environment's own Dockerfile" in (staged.root / "Dockerfile").read_text()


def test_a_space_gets_the_template_edited_for_the_hub(tmp_path: Path) -> None:
    project = load_project(REPO / "envs" / "snake_env")
    staged = stage_space(project, tmp_path / "space", build_wheels=no_wheels)
    text = (staged.root / "Dockerfile").read_text()
    assert '"openenv.core.env_server.boot", "snake_env.server.app", "--host", "0.0.0.0"' in text
    assert "--find-links /tmp/wheels /tmp/wheels/*.whl" in text
    assert not any("Dockerfile" in note for note in staged.notes), staged.notes


def test_template_runs_the_server_as_pid_1_as_a_user_with_a_healthcheck() -> None:
    text = render_dockerfile("openenv-x", "x_env", port=8123)
    lines = text.splitlines()
    final_stage = lines[max(i for i, line in enumerate(lines) if line.startswith("FROM ")) :]
    assert any(line.startswith("USER openenv") for line in final_stage)
    assert lines[-1] == (
        'CMD ["python", "-m", "openenv.core.env_server.boot", "x_env.server.app", '
        '"--host", "0.0.0.0", "--port", "8123"]'
    )
    # Bytecode compiled at install: the provider runs the image with a read-only root.
    assert "pip install --no-cache-dir --disable-pip-version-check --compile" in text
    assert "HEALTHCHECK" in text and "127.0.0.1:8123/health" in text
    assert "EXPOSE 8123" in final_stage
    # One venv: the final stage copies the builder's and installs nothing itself.
    assert "COPY --from=builder /app/.venv /app/.venv" in final_stage
    assert not any("pip install" in line for line in final_stage)
    # The builder installs the distribution from the staged wheels only.
    assert "ARG PIP_NO_INDEX=1" in lines and "COPY wheels /tmp/wheels" in lines
    assert "--find-links /tmp/wheels openenv-x" in text
