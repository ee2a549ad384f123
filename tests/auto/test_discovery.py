"""Discovery of installed environment packages: names, manifests, broken packages, the cache."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import pytest

from openenv import _install
from openenv.auto import (
    AutoAction,
    AutoEnv,
    DiscoveryWarning,
    EnvironmentImportError,
    EnvironmentNotFoundError,
    discover,
    find_environment,
    normalize_env_name,
)
from openenv.core import EnvClient
from openenv.core.env_server.types import Action, Observation
from openenv.core.manifest import load_project
from openenv.core.mcp_client import MCPToolClient
from tests.support.envs import env_params
from tests.support.server import REPO

from .fake_dist import manifest_text, write_distribution

ENV_DIRS = sorted(p for p in (REPO / "envs").iterdir() if (p / "openenv.yaml").is_file())

# The classes each repository environment exports; a new environment is checked generically.
EXPECTED = {
    "echo": ("EchoEnv", "CallToolAction", "CallToolObservation"),
    "grid_world": ("GridWorldEnv", "GridWorldAction", "GridWorldObservation"),
    "openspiel": ("OpenSpielEnv", "OpenSpielAction", "OpenSpielObservation"),
    "reasoning_gym": ("ReasoningGymEnv", "ReasoningGymAction", "ReasoningGymObservation"),
    "textarena": ("TextArenaEnv", "TextArenaAction", "TextArenaObservation"),
}


@pytest.mark.parametrize("env_dir", env_params(ENV_DIRS))
def test_every_repository_environment_is_listed_with_its_own_classes(env_dir: Path):
    project = load_project(env_dir)
    listed = {info["distribution"]: info for info in AutoEnv.list_environments()}
    if project.dist_name not in listed:
        pytest.fail(f"{project.dist_name} is not discovered; is it installed (uv sync)?")
    info = listed[project.dist_name]
    key = project.manifest.env_key
    assert info["env_key"] == key
    assert info["name"] == project.manifest.name
    assert info["package"] == project.package
    assert info["version"] == project.version
    assert info["description"] == project.manifest.description
    assert info["default_image"] == f"{project.image_name}:latest"
    # An editable install is read from its source folder, not from a copy.
    assert Path(info["manifest_path"]) == env_dir / "openenv.yaml"

    package = importlib.import_module(project.package)
    client_cls = AutoEnv.get_env_class(project.dist_name)
    action_cls = AutoAction.from_env(project.manifest.name)
    observation_cls = find_environment(key).load_observation_class()
    if key in EXPECTED:
        names = EXPECTED[key]
        assert (info["env_class"], info["action_class"], info["observation_class"]) == names
        assert client_cls is getattr(package, names[0])
        assert action_cls is getattr(package, names[1])
        assert observation_cls is getattr(package, names[2])
    else:
        assert client_cls is getattr(package, client_cls.__name__)
        assert action_cls is getattr(package, action_cls.__name__)
        assert observation_cls is getattr(package, observation_cls.__name__)
    assert issubclass(client_cls, EnvClient)
    assert issubclass(action_cls, Action)
    assert issubclass(observation_cls, Observation)
    # A typed client declares the same models as the manifest. An MCP client's steps are tool
    # calls; the observation type it may declare is its reset's (repo_env's task).
    declared_action = client_cls.action_type
    if isinstance(declared_action, type) and issubclass(declared_action, Action):
        assert declared_action is action_cls
    declared_observation = client_cls.observation_type
    typed = isinstance(declared_observation, type) and issubclass(declared_observation, Observation)
    if typed and not issubclass(client_cls, MCPToolClient):
        assert issubclass(observation_cls, declared_observation)


def test_list_is_sorted_and_excludes_the_framework():
    keys = [info["env_key"] for info in AutoEnv.list_environments()]
    assert keys == sorted(keys)
    distributions = {info["distribution"] for info in AutoEnv.list_environments()}
    assert "openenv" not in distributions
    assert "openenv-core" not in distributions
    assert [a["env_key"] for a in AutoAction.list_actions()] == keys


@pytest.mark.parametrize(
    "spelling",
    ["echo", "ECHO", "echo_env", "Echo-Env", "openenv-echo", "OpenEnv_Echo", " echo "],
)
def test_every_spelling_finds_echo(spelling: str):
    assert AutoEnv.get_env_info(spelling)["distribution"] == "openenv-echo"


@pytest.mark.parametrize(
    "spelling", ["grid_world", "grid-world", "GRID_WORLD_ENV", "openenv-grid-world", "GridWorld"]
)
def test_every_spelling_finds_grid_world(spelling: str):
    assert AutoEnv.get_env_info(spelling)["env_key"] == "grid_world"


def test_normalize_env_name():
    assert normalize_env_name("openenv-Grid-World") == "grid_world"
    assert normalize_env_name("grid_world_env") == "grid_world"
    assert normalize_env_name("env") == "env"


def test_unknown_name_lists_installed_and_says_how_to_install():
    with pytest.raises(EnvironmentNotFoundError) as caught:
        AutoEnv.get_env_info("no-such-thing")
    message = str(caught.value)
    assert "'no-such-thing'" in message
    assert "echo" in message and "grid_world" in message
    # No package name to install from PyPI (none of these is there): a folder to install.
    assert "pip install openenv-no-such-thing" not in message
    assert "-e PATH/TO/no_such_thing_env" in message and "openenv-no-such-thing" in message
    assert "echo" in caught.value.installed
    assert isinstance(caught.value, LookupError)
    assert isinstance(caught.value, ValueError)  # what OpenEnv raises


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A source checkout with `envs/foo_env` (not installed), the current folder."""
    folder = tmp_path / "checkout" / "envs" / "foo_env"
    folder.mkdir(parents=True)
    (folder / "pyproject.toml").write_text('[project]\nname = "openenv-foo"\n')
    monkeypatch.setattr(_install, "source_checkout", lambda: tmp_path / "checkout")
    monkeypatch.chdir(tmp_path / "checkout")
    return tmp_path / "checkout"


def test_an_environment_of_the_checkout_is_installed_from_its_folder_with_pip(
    checkout: Path, monkeypatch: pytest.MonkeyPatch
):
    """After the README's install (openenv and echo with pip), the hint is a pip command that
    installs the checkout's folder into this interpreter: no package from PyPI, no uv."""
    monkeypatch.setattr(_install, "has_pip", lambda: True)
    with pytest.raises(EnvironmentNotFoundError) as caught:
        AutoAction.from_env("foo")
    message = str(caught.value)
    assert f"`{_install.python_command()} -m pip install -e ./envs/foo_env`" in message, message
    assert "openenv-foo" not in message and "uv " not in message


def test_without_pip_the_hint_is_uv_pip_into_this_interpreter(
    checkout: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(_install, "has_pip", lambda: False)
    monkeypatch.setattr(_install.shutil, "which", lambda name: f"/bin/{name}")
    with pytest.raises(EnvironmentNotFoundError) as caught:
        find_environment("foo")
    message = str(caught.value)
    python = _install.python_command()
    assert f"`uv pip install --python {python} -e ./envs/foo_env`" in message, message


def test_an_unknown_name_lists_the_checkouts_environments_not_installed(checkout: Path):
    with pytest.raises(EnvironmentNotFoundError) as caught:
        find_environment("bar")
    message = str(caught.value)
    assert "-e PATH/TO/bar_env" in message
    assert "Not installed yet, in this checkout's envs/: foo." in message


def test_the_hint_names_this_checkouts_folder(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(REPO)
    assert _install.source_checkout() == REPO
    assert "-e ./envs/grid_world_env`" in _install.install_env_hint("grid_world")


def test_wheel_install_is_read_from_the_package(site_dir: Path):
    write_distribution(site_dir, "wheely")
    info = find_environment("wheely")
    assert info.manifest_path == site_dir / "wheely_env" / "openenv.yaml"
    assert info.description == "a fake environment"
    assert info.version == "0.1.0"
    assert info.default_image == "openenv-wheely:latest"
    assert AutoEnv.get_env_class("openenv-wheely").__name__ == "WheelyEnv"
    assert AutoAction.from_env("wheely_env").__name__ == "WheelyAction"


def test_editable_install_reads_the_source_folder_not_a_copy(
    site_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    source = tmp_path / "checkout" / "edited_env"
    source.mkdir(parents=True)
    fake = write_distribution(site_dir, "edited", editable_source=source)
    # What the install's .pth file does: the source folder goes after site-packages.
    monkeypatch.setattr(sys, "path", [*sys.path, str(source)])
    # hatchling's force-include also copies the manifest into site-packages; the source wins.
    stale = site_dir / "edited_env"
    stale.mkdir()
    (stale / "openenv.yaml").write_text(manifest_text("edited", "stale copy"))
    with (fake.dist_info / "RECORD").open("a") as record:
        record.write("edited_env/openenv.yaml,,\n")

    info = find_environment("edited")
    assert info.manifest_path == source / "openenv.yaml"
    assert info.description == "a fake environment"
    assert AutoEnv.get_env_class("edited").__module__ == "edited_env.client"

    # Editing the manifest is seen on the next call, without clearing anything.
    manifest = source / "openenv.yaml"
    manifest.write_text(manifest_text("edited", "edited again"))
    stat = manifest.stat()
    os.utime(manifest, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert find_environment("edited").description == "edited again"


def test_a_manifest_added_to_an_editable_source_is_seen(
    site_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    source = tmp_path / "checkout" / "later_env"
    source.mkdir(parents=True)
    write_distribution(site_dir, "later", manifest=None, editable_source=source)
    monkeypatch.setattr(sys, "path", [*sys.path, str(source)])
    assert find_environment("later").manifest_path is None

    (source / "openenv.yaml").write_text(manifest_text("later", "now with a manifest"))
    info = find_environment("later")
    assert info.manifest_path == source / "openenv.yaml"
    assert info.description == "now with a manifest"


def test_without_manifest_the_naming_convention_applies(site_dir: Path):
    write_distribution(site_dir, "plain_thing", manifest=None, record=False, top_level=True)
    info = AutoEnv.get_env_info("plain-thing")
    assert info["package"] == "plain_thing_env"
    assert info["client"] == "plain_thing_env.client:PlainThingEnv"
    assert info["action"] == "plain_thing_env.models:PlainThingAction"
    assert info["observation"] == "plain_thing_env.models:PlainThingObservation"
    assert info["manifest_path"] is None
    assert info["description"] == "fake plain_thing"
    assert AutoEnv.get_env_class("plain_thing").__name__ == "PlainThingEnv"
    assert AutoAction.from_env("plain_thing").__name__ == "PlainThingAction"


def test_bare_class_names_are_looked_up_in_the_package(site_dir: Path):
    # OpenEnv's legacy manifests name classes without a module.
    text = "name: legacy_env\napp: legacy_env.server.app:app\naction: LegacyAction\n"
    write_distribution(site_dir, "legacy", manifest=text)
    assert AutoAction.get_action_info("legacy")["action"] == "legacy_env.models:LegacyAction"
    assert AutoAction.from_env("legacy").__name__ == "LegacyAction"


def test_a_class_that_does_not_import_is_a_typed_error(site_dir: Path):
    text = manifest_text("wrong").replace("WrongEnv", "MissingEnv")
    write_distribution(site_dir, "wrong", manifest=text)
    with pytest.raises(
        EnvironmentImportError, match=r"MissingEnv.*openenv-wrong from where.*install.* -e PATH"
    ):
        AutoEnv.get_env_class("wrong")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("name: [unclosed\n", "not valid YAML"),
        ("name: broken_env\nport: 8000\n", "app"),
        ("- just\n- a list\n", "mapping"),
    ],
)
def test_broken_manifest_is_skipped_with_a_warning(site_dir: Path, text: str, reason: str):
    write_distribution(site_dir, "broken", manifest=text)
    write_distribution(site_dir, "healthy")
    with pytest.warns(DiscoveryWarning, match=rf"openenv-broken.*{reason}"):
        found = discover()
    assert "broken" not in found.environments
    assert "healthy" in found.environments
    assert "echo" in found.environments
    assert reason in found.skipped["openenv-broken"]
    with pytest.raises(EnvironmentNotFoundError, match=r"\(openenv-broken\) but was skipped"):
        AutoEnv.get_env_info("broken")


def test_package_with_neither_manifest_nor_code_is_skipped(site_dir: Path):
    write_distribution(site_dir, "ghost", manifest=None, package=False)
    with pytest.warns(DiscoveryWarning, match=r"openenv-ghost.*ghost_env"):
        found = discover()
    assert "ghost" not in found.environments
    assert "echo" in found.environments


def test_cache_never_hides_a_package_installed_or_removed_later(site_dir: Path):
    first = discover()
    assert first.resolve("zzz") is None
    assert discover() is first  # nothing changed: the cached result is reused

    fake = write_distribution(site_dir, "zzz")
    info = find_environment("openenv-zzz")  # no cache clearing in between
    assert info.package == "zzz_env"
    assert AutoEnv.get_env_class("zzz").__name__ == "ZzzEnv"
    assert "zzz" in [e["env_key"] for e in AutoEnv.list_environments()]

    fake.remove()
    assert discover().resolve("zzz") is None
    with pytest.raises(EnvironmentNotFoundError):
        AutoEnv.get_env_info("zzz")
    assert "echo" in discover().environments
