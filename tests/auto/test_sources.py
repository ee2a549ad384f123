"""`AutoEnv`/`AutoAction` beyond installed names: `from_hub`, Hub repository ids (installed or in
the local Hub cache, never downloaded), and environment folders in OpenEnv's flat layout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from echo_env import EchoEnv
from openenv.auto import AutoAction, AutoEnv, EnvironmentNotFoundError, HubUnavailableError
from openenv.cli.commands.init import EnvNames, render_files, write_atomically
from openenv.core.env_server.mcp_types import CallToolAction
from tests.support.server import RunningServer


@pytest.fixture(scope="module")
def game_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A folder made as `openenv init auto_game` makes it (the flat layout); its package is
    unloaded afterwards."""
    target = tmp_path_factory.mktemp("init") / "auto_game"
    write_atomically(target, render_files(EnvNames("auto_game"), target))
    yield target
    for name in [m for m in sys.modules if m == "auto_game" or m.startswith("auto_game.")]:
        del sys.modules[name]


def test_from_hub_is_from_env_under_openenvs_other_name(echo_server: RunningServer) -> None:
    assert type(AutoEnv.from_hub("echo", base_url=echo_server.url)) is EchoEnv
    assert AutoAction.from_hub("echo") is CallToolAction
    assert AutoAction.from_hub("echo", skip_install=True).__name__ == "GenericAction"


@pytest.mark.parametrize(
    "repo",
    ["someone/echo_env", "someone/echo-env", "https://huggingface.co/spaces/someone/echo_env"],
)
def test_a_hub_repo_id_uses_its_installed_package(echo_server: RunningServer, repo: str) -> None:
    client = AutoEnv.from_hub(repo, base_url=echo_server.url)
    assert type(client) is EchoEnv
    assert AutoAction.from_env(repo) is CallToolAction
    with client.sync() as env:
        env.reset()
        assert env.call_tool("echo_message", message="from the hub id") == "from the hub id"


def test_a_hub_repo_neither_installed_nor_cached_is_a_clear_error(
    echo_server: RunningServer,
) -> None:
    with pytest.raises(HubUnavailableError) as caught:
        AutoEnv.from_hub("someone/no-such-env-anywhere", base_url=echo_server.url)
    error = caught.value
    assert isinstance(error, ValueError)  # what OpenEnv raises when an install fails
    assert error.repo_id == "someone/no-such-env-anywhere"
    message = str(error)
    assert "does not download or install code from the Hub" in message
    assert "pip install git+" in message and "skip_install=True" in message
    with pytest.raises(ValueError, match="does not download"):
        AutoAction.from_hub("someone/no-such-env-anywhere")
    # The generic client needs nothing from the Hub.
    generic = AutoEnv.from_hub(
        "someone/no-such-env-anywhere", base_url=echo_server.url, skip_install=True
    )
    assert type(generic).__name__ == "GenericEnvClient"


def test_an_environment_folder_gives_its_own_classes(game_folder: Path) -> None:
    action_cls = AutoAction.from_env(str(game_folder))
    assert action_cls.__name__ == "AutoGameAction"
    assert Path(sys.modules[action_cls.__module__].__file__ or "").parent == game_folder
    client_cls = AutoEnv.get_env_class(str(game_folder))
    assert client_cls.__name__ == "AutoGameEnv"
    assert AutoAction.from_hub(str(game_folder)) is action_cls


def test_a_folder_without_a_manifest_is_not_taken_for_a_hub_repo(tmp_path: Path) -> None:
    for name in (str(tmp_path), "./no/such/folder"):
        with pytest.raises(EnvironmentNotFoundError, match="is not an environment folder"):
            AutoAction.from_env(name)


@pytest.mark.slow
def test_an_environment_folder_is_started_and_played(game_folder: Path) -> None:
    client = AutoEnv.from_env(str(game_folder))
    action_cls = AutoAction.from_env(str(game_folder))
    with client.sync() as env:
        result = env.reset(seed=3)
        assert result.observation.guesses_left == 7
        result = env.step(action_cls(guess=50))
        assert result.observation.last_guess == 50
        assert env.state().step_count == 1


def test_a_space_in_the_local_hub_cache_is_used_offline(game_folder: Path, tmp_path: Path) -> None:
    """The Hub cache's layout (what `hf download --repo-type space` leaves), read with
    huggingface_hub's own offline lookup in a fresh interpreter pointed at this cache."""
    cache = tmp_path / "hub"
    repo = cache / "spaces--someone--cached-game"
    revision = "0123456789abcdef0123456789abcdef01234567"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(revision)
    snapshot = repo / "snapshots" / revision
    snapshot.parent.mkdir(parents=True)
    shutil.copytree(game_folder, snapshot, ignore=shutil.ignore_patterns("__pycache__"))
    code = (
        "from openenv.auto import AutoAction, AutoEnv\n"
        "action = AutoAction.from_hub('someone/cached-game')\n"
        "client = AutoEnv.get_env_class('someone/cached-game')\n"
        "print(action.__name__, client.__name__, action(guess=3).guess)\n"
    )
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["AutoGameAction", "AutoGameEnv", "3"]


def test_an_installed_package_in_openenvs_flat_layout(site_dir: Path) -> None:
    """Installed from a flat folder, the manifest's `server.app:app` is relative to the package:
    serving the environment by name imports `<package>.server.app`."""
    from openenv.providers.spec import resolve_app

    from .fake_dist import write_distribution

    manifest = "spec_version: 1\nname: flatgame_env\napp: server.app:app\nport: 8000\n"
    write_distribution(site_dir, "flatgame", manifest=manifest, top_level=True)
    assert resolve_app("flatgame").app == "flatgame_env.server.app:app"
    assert AutoAction.from_env("flatgame").__name__ == "FlatgameAction"
    assert AutoEnv.get_env_class("openenv-flatgame").__name__ == "FlatgameEnv"
