"""The CLI on environments in OpenEnv's flat layout (`models.py`, `client.py`, `server/app.py`,
`app: server.app:app`): validate, serve and push run on a folder made by the published
package's `openenv init`, one made by ours, and a copy of the echo environment in OpenEnv's
layout; each folder's own client plays an episode with the published package and with ours.
(`build` is in tests/images/test_openenv_layout_images.py.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from openenv.core.manifest import load_project
from openenv.testing.validation import check_structure
from tests.cli.test_push import StandInHub
from tests.support.server import free_port, stop_process, wait_healthy

from .conftest import OUR_PYTHON
from .layout_envs import (
    OUR_OPENENV,
    LayoutEnv,
    check_episode,
    echo_copy,
    our_init,
    play,
    published_init,
)

pytestmark = pytest.mark.compat
OUR_PYTHON_VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"

PUBLISHED = pytest.param("published", marks=pytest.mark.slow, id="published-init")
CASES = [PUBLISHED, pytest.param("ours", id="our-init"), pytest.param("echo", id="echo-copy")]


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return {}


@pytest.fixture
def layout_env(
    request: pytest.FixtureRequest, made: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> LayoutEnv:
    """The folder of one case, made once per module (the published init takes a while)."""
    kind = request.param
    if kind not in made:
        out = tmp_path_factory.mktemp(kind)
        if kind == "published":
            made[kind] = published_init(request.getfixturevalue("compat_python"), out)
        elif kind == "ours":
            made[kind] = our_init(out)
        else:
            made[kind] = echo_copy(out)
    return made[kind]


def openenv(
    *args: str, env: dict[str, str] | None = None, drop: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in {**os.environ, **(env or {})}.items() if k not in drop}
    return subprocess.run(
        [OUR_OPENENV, *args], capture_output=True, text=True, timeout=600, env=environ, check=False
    )


@pytest.mark.parametrize("layout_env", CASES, indirect=True)
def test_the_folder_is_read_as_openenvs_flat_layout(layout_env: LayoutEnv) -> None:
    project = load_project(layout_env.root)
    assert project.flat and project.manifest.app == "server.app:app"
    assert project.package == layout_env.package and project.package_dir == layout_env.root
    assert project.app_module == f"{layout_env.package}.server.app"
    report = check_structure(layout_env.root)  # what `openenv validate --no-run` checks
    assert report.ok, str(report)
    passed = {c.name for c in report.results if c.passed}
    assert {"package_layout", "package_models", "server_entry_point", "manifest"} <= passed


@pytest.mark.slow
@pytest.mark.parametrize("layout_env", CASES, indirect=True)
def test_validate_serves_the_folder_and_passes(layout_env: LayoutEnv) -> None:
    result = openenv("validate", str(layout_env.root), "--json")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert any(c["id"] == "reset" and c["status"] == "pass" for c in report["criteria"])


@pytest.fixture
def served(layout_env: LayoutEnv) -> Iterator[str]:
    """`openenv serve FOLDER` (ours), as a user runs it."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [OUR_OPENENV, "serve", str(layout_env.root), "--host", "127.0.0.1", "--port", str(port)],
        env={**os.environ, "OPENENV_LOG_LEVEL": "warning"},
        cwd=layout_env.root.parent,
    )
    try:
        wait_healthy(url, process)
        yield url
    finally:
        stop_process(process)


@pytest.mark.slow
@pytest.mark.parametrize("layout_env", CASES, indirect=True)
def test_serve_plays_an_episode_with_our_client_and_the_published_one(
    layout_env: LayoutEnv, served: str, compat_python: str
) -> None:
    ours = play(OUR_PYTHON, layout_env, served)
    published = play(compat_python, layout_env, served)
    assert "openenv-0.10.0" not in ours["openenv_file"]
    assert "openenv-0.10.0" in published["openenv_file"]
    check_episode(layout_env, ours)
    check_episode(layout_env, published)


@pytest.mark.slow
@pytest.mark.parametrize("layout_env", [pytest.param("echo", id="echo-copy")], indirect=True)
def test_the_echo_copy_runs_unchanged_on_the_published_package(
    layout_env: LayoutEnv, compat_python: str
) -> None:
    """The same folder, served by the published package the way OpenEnv documents it
    (`uvicorn server.app:app` from the folder), is played by both clients."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [compat_python, "-m", "uvicorn", "server.app:app", "--port", str(port)],
        cwd=layout_env.root,
        env={**os.environ, "PYTHONPATH": ""},
    )
    try:
        wait_healthy(url, process)
        check_episode(layout_env, play(OUR_PYTHON, layout_env, url))
        check_episode(layout_env, play(compat_python, layout_env, url))
    finally:
        stop_process(process)


@pytest.mark.slow
@pytest.mark.parametrize("layout_env", CASES, indirect=True)
def test_push_stages_a_space_from_the_folder(layout_env: LayoutEnv, tmp_path: Path) -> None:
    stage = tmp_path / "space"
    result = openenv("push", str(layout_env.root), "--dry-run", "--stage-dir", str(stage))
    assert result.returncode == 0, result.stderr[-3000:]
    plan = json.loads(result.stdout)
    files = set(plan["files"])
    for needed in ("Dockerfile", "README.md", "openenv.yaml", "models.py", "server/app.py"):
        assert needed in files, needed
    assert "server/Dockerfile" not in files  # moved to the root, where a Space reads it
    wheels = [f for f in files if f.startswith("wheels/")]
    env_wheel = [w for w in wheels if not w.startswith("wheels/openenv-")]
    assert len(env_wheel) == 1, wheels
    card = yaml.safe_load((stage / "README.md").read_text().split("---\n")[1])
    assert card["sdk"] == "docker" and card["app_port"] == 8000


@pytest.mark.slow
@pytest.mark.parametrize("layout_env", [PUBLISHED], indirect=True)
def test_push_uploads_a_folder_made_by_openenvs_init(layout_env: LayoutEnv) -> None:
    with StandInHub() as hub:
        result = subprocess.run(
            [OUR_OPENENV, "push", str(layout_env.root), "-r", "my-env"],
            capture_output=True,
            text=True,
            timeout=600,
            env=hub.env(),
            check=False,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    assert not hub.unknown, hub.unknown
    assert hub.created[0]["name"] == "my-env"
    for needed in ("Dockerfile", "openenv.yaml", "server/app.py", "client.py", "models.py"):
        assert needed in hub.files, needed


@pytest.mark.slow
@pytest.mark.parametrize("layout_env", [pytest.param("ours", id="our-init")], indirect=True)
def test_push_checks_the_folder_before_asking_for_a_token(
    layout_env: LayoutEnv, tmp_path: Path
) -> None:
    broken = tmp_path / layout_env.package
    shutil.copytree(layout_env.root, broken)
    shutil.rmtree(broken / "server")  # the package's server/ is gone: no wheel can be built
    env = {"HF_HOME": str(tmp_path / "hf"), "HF_ENDPOINT": "http://127.0.0.1:9"}
    drop = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH")
    result = openenv("push", str(broken), "-r", "me/space", env=env, drop=drop)
    assert result.returncode == 1
    assert "building the wheel" in result.stderr
    assert "no Hugging Face token found" not in result.stderr  # asked only for a sound folder
    fixed = openenv("push", str(layout_env.root), "-r", "me/space", env=env, drop=drop)
    assert fixed.returncode == 1
    assert "no Hugging Face token found" in fixed.stderr


@pytest.mark.slow
@pytest.mark.parametrize("layout_env", [PUBLISHED], indirect=True)
def test_our_init_lays_out_what_openenvs_init_does(layout_env: LayoutEnv, tmp_path: Path) -> None:
    theirs = layout_env.root
    ours = our_init(tmp_path).root

    def files(root: Path) -> set[str]:
        return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}

    renamed = {f.replace("my_env", "my_game") for f in files(theirs)}
    # Every file OpenEnv's init writes has its counterpart (its pinned requirements.txt and
    # uv.lock aside: the dependencies live in pyproject.toml).
    assert renamed - {"server/requirements.txt", "uv.lock"} <= files(ours)
    for root, package in ((theirs, "my_env"), (ours, "my_game")):
        project = load_project(root)
        assert project.manifest.app == "server.app:app"
        assert project.pyproject["tool"]["setuptools"]["package-dir"][package] == "."
        assert project.scripts["server"] == f"{package}.server.app:main"


@pytest.mark.slow
@pytest.mark.parametrize("layout_env", CASES, indirect=True)
def test_build_context_installs_the_package_the_image_serves(
    layout_env: LayoutEnv, tmp_path: Path, compat_python: str
) -> None:
    """What `openenv build` stages (tests/images builds it with Docker): the Dockerfile runs
    `python -m <package>.server.app` from the environment's wheel. Installed from the staged
    wheel alone, outside the folder, that command serves an episode to both clients."""
    from openenv.cli.commands.build import stage_context

    project = load_project(layout_env.root)
    context = tmp_path / "context"
    use_template = layout_env.package == "my_env"  # OpenEnv's own Dockerfile downloads uv
    dockerfile = stage_context(project, context, OUR_PYTHON_VERSION, use_template=use_template)
    text = dockerfile.read_text()
    assert f'"{layout_env.package}.server.app"' in text
    wheels = sorted((context / "wheels").glob("*.whl"))
    env_wheel = [w for w in wheels if w.name.startswith(project.dist_name.replace("-", "_"))]
    assert len(env_wheel) == 1, [w.name for w in wheels]
    site = tmp_path / "site"
    with zipfile.ZipFile(env_wheel[0]) as wheel:  # a pure-Python wheel installs by unpacking
        wheel.extractall(site)
    assert (site / layout_env.package / "server" / "app.py").is_file()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [OUR_PYTHON, "-m", f"{layout_env.package}.server.app", "--host", "127.0.0.1"]
    process = subprocess.Popen(
        [*command, "--port", str(port)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(site), "OPENENV_LOG_LEVEL": "warning"},
    )
    try:
        wait_healthy(url, process)
        check_episode(layout_env, play(OUR_PYTHON, layout_env, url))
        check_episode(layout_env, play(compat_python, layout_env, url))
    finally:
        stop_process(process)
