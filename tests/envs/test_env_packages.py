"""What every shipped environment takes from its `openenv.yaml` instead of repeating it: the
metadata `/metadata` serves, the package version, the server's defaults."""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
from pathlib import Path

import httpx
import pytest

from openenv.core.env_server.runner import server_parser
from openenv.core.manifest import find_package_manifest, load_project, package_manifest
from tests.support.envs import env_dirs, env_params

ENVS = env_params(env_dirs())


@pytest.mark.parametrize("env_dir", ENVS)
async def test_metadata_endpoint_serves_the_manifest(env_dir: Path) -> None:
    project = load_project(env_dir)
    module, _, attribute = project.manifest.app.partition(":")
    app = getattr(importlib.import_module(module), attribute)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://env") as client:
        reply = await client.get("/metadata")
    assert reply.status_code == 200, reply.text
    metadata = reply.json()
    assert metadata["name"] == project.manifest.name
    assert metadata["description"] == project.manifest.description
    assert metadata["version"] == project.manifest.version


@pytest.mark.parametrize("env_dir", ENVS)
def test_the_package_version_and_description_come_from_the_manifest(env_dir: Path) -> None:
    project = load_project(env_dir)
    assert project.manifest.version and project.manifest.description
    # Built from openenv.yaml by the hatch version source: what pip and uv see.
    assert importlib.metadata.version(project.dist_name) == project.manifest.version
    assert project.version == project.manifest.version
    assert "description" not in project.pyproject["project"], "openenv.yaml holds it"


@pytest.mark.parametrize("env_dir", ENVS)
def test_the_server_command_line_defaults_to_loopback_and_the_manifest_port(
    env_dir: Path,
) -> None:
    project = load_project(env_dir)
    assert project.scripts["server"] == f"{project.package}.server.app:main"
    args = server_parser(project.manifest.app).parse_args([])
    assert (args.host, args.port, args.workers) == ("127.0.0.1", project.manifest.port, 1)


def write_package(root: Path, package: str, manifest_app: str, *, inside: bool) -> None:
    (root / package).mkdir(parents=True)
    (root / package / "__init__.py").write_text("")
    manifest = f"name: {package}\nversion: '2.0'\napp: {manifest_app}\ndescription: d\n"
    (root / package / "openenv.yaml" if inside else root / "openenv.yaml").write_text(manifest)


def test_package_manifest_inside_an_installed_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_package(tmp_path, "wheel_layout_env", "wheel_layout_env.server.app:app", inside=True)
    monkeypatch.syspath_prepend(str(tmp_path))
    manifest = package_manifest("wheel_layout_env.server.some_module")
    assert manifest is not None and (manifest.name, manifest.version) == ("wheel_layout_env", "2.0")
    assert "wheel_layout_env" not in sys.modules  # found without importing the package


def test_a_manifest_beside_another_package_is_not_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_package(tmp_path, "stray_pkg", "other_env.server.app:app", inside=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert find_package_manifest("stray_pkg") == tmp_path / "openenv.yaml"
    assert package_manifest("stray_pkg.module") is None
