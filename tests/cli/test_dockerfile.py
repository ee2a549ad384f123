"""Every reference environment uses the Dockerfile template, so a fix to it reaches them all."""

from __future__ import annotations

from pathlib import Path

import pytest

from openenv.cli.dockerfile import DOCKERIGNORE, render_dockerfile
from openenv.core.manifest import load_project
from tests.support.server import REPO

ENVS = sorted(path for path in (REPO / "envs").iterdir() if (path / "openenv.yaml").is_file())


@pytest.mark.parametrize("env_dir", ENVS, ids=lambda path: path.name)
def test_env_dockerfile_is_the_template(env_dir: Path) -> None:
    project = load_project(env_dir)
    expected = render_dockerfile(project.dist_name, project.package, port=project.manifest.port)
    assert (env_dir / "Dockerfile").read_text() == expected, (
        "regenerate it with openenv.cli.dockerfile.render_dockerfile"
    )
    assert (env_dir / ".dockerignore").read_text() == DOCKERIGNORE


def test_template_runs_the_server_as_pid_1_as_a_user_with_a_healthcheck() -> None:
    text = render_dockerfile("openenv-x", "x_env", port=8123)
    lines = text.splitlines()
    final_stage = lines[max(i for i, line in enumerate(lines) if line.startswith("FROM ")) :]
    assert any(line.startswith("USER openenv") for line in final_stage)
    assert lines[-1] == (
        'CMD ["python", "-m", "x_env.server.app", "--host", "0.0.0.0", "--port", "8123"]'
    )
    assert "HEALTHCHECK" in text and "127.0.0.1:8123/health" in text
    # One venv: the final stage copies the builder's and installs nothing itself.
    assert "COPY --from=builder /app/.venv /app/.venv" in final_stage
    assert not any("pip install" in line for line in final_stage)
