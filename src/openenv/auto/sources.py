"""Where `AutoEnv`/`AutoAction` find an environment that is not named by an installed package:
an environment folder on disk, or a Hugging Face Hub repository (an installed package, or a
copy already in the Hub's local cache).

Nothing is ever downloaded or installed from the Hub here: a repository that is neither
installed nor cached is a `HubUnavailableError` saying what to do instead.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Optional

from openenv.core.manifest import (
    MANIFEST_NAME,
    ManifestError,
    flat_package_name,
    is_flat_app,
    load_manifest,
)

from .discovery import EnvInfo, env_info, find_environment, normalize_env_name
from .errors import EnvironmentImportError, EnvironmentNotFoundError, HubUnavailableError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

_HUB_HOST = "huggingface.co"


def environment_folder(name: str) -> Optional[Path]:
    """`name` as an environment folder (one with openenv.yaml), or None."""
    if not name or name.startswith(("http://", "https://")):
        return None
    path = Path(name).expanduser()
    return path.resolve() if (path / MANIFEST_NAME).is_file() else None


def is_hub_name(name: str) -> bool:
    """A Hub repository id ('owner/name') or URL, as OpenEnv tells them from environment names."""
    return "/" in name or _HUB_HOST in name


def hub_repo_id(name: str) -> str:
    """'owner/name' of a repository id or of a Hub URL (spaces/ and trailing slashes dropped)."""
    text = name.strip().rstrip("/")
    if _HUB_HOST in text:
        text = text.split(_HUB_HOST, 1)[1].lstrip("/")
        if text.startswith("spaces/"):
            text = text[len("spaces/") :]
    parts = [part for part in text.split("/") if part]
    return "/".join(parts[-2:])


def cached_space(repo_id: str) -> Optional[Path]:
    """The Hub cache's copy of Space `repo_id` (HF_HUB_CACHE / HF_HOME), if it holds one with
    an openenv.yaml; read offline, never downloaded."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:  # pragma: no cover - huggingface_hub is a dependency
        return None
    for repo_type in ("space", "model"):
        try:
            folder = snapshot_download(repo_id, repo_type=repo_type, local_files_only=True)
        except Exception:  # not cached (LocalEntryNotFoundError), or not a valid repo id
            continue
        if (Path(folder) / MANIFEST_NAME).is_file():
            return Path(folder)
    return None


def _pyproject(root: Path) -> dict:
    try:
        return tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}


def _import_folder_package(package: str, folder: Path) -> None:
    """Import `folder` as package `package` (its relative imports then work), unless a package
    of that name is imported already from the same place."""
    init = folder / "__init__.py"
    loaded = sys.modules.get(package)
    if loaded is not None:
        locations = [Path(p).resolve() for p in getattr(loaded, "__path__", [])]
        if folder.resolve() in locations:
            return
        raise EnvironmentImportError(
            f"cannot load the environment in {folder} as package {package!r}: a package of that "
            f"name is already imported from {locations[0] if locations else loaded!r}"
        )
    if not init.is_file():
        raise EnvironmentImportError(
            f"{folder} has no __init__.py: it is not the package of an environment"
        )
    spec = importlib.util.spec_from_file_location(
        package, init, submodule_search_locations=[str(folder)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[package] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:
        del sys.modules[package]
        raise EnvironmentImportError(
            f"importing the environment in {folder} failed: {type(exc).__name__}: {exc}"
        ) from exc


def folder_info(folder: Path) -> EnvInfo:
    """What is known of the environment in `folder`, its package imported from there, in
    either layout (flat, as OpenEnv's `openenv init` makes it, or a package folder)."""
    try:
        manifest = load_manifest(folder)
    except (ManifestError, OSError, UnicodeDecodeError) as exc:
        raise EnvironmentNotFoundError(
            f"{folder} is not a usable environment folder: {exc}", name=str(folder), installed=[]
        ) from None
    if is_flat_app(manifest.app):
        package = flat_package_name(folder, _pyproject(folder))
        package_dir = folder
    else:
        package = manifest.app.partition(":")[0].partition(".")[0]
        package_dir = folder / package
    _import_folder_package(package, package_dir)
    return env_info(
        normalize_env_name(manifest.name),
        package,
        manifest,
        distribution=str(folder),
        version=manifest.version or "0.0.0",
        description=manifest.description or "",
        manifest_path=folder / MANIFEST_NAME,
    )


def resolve(name: str, hint: str = "") -> tuple[EnvInfo, Optional[Path]]:
    """The environment `name` stands for, and its folder when it is one (to start it from).

    `name` may be an installed environment ('echo'), an environment folder ('./my_env'), or a
    Hub repository ('owner/echo_env', a Hub URL): the installed package its name follows
    OpenEnv's convention for ('openenv-echo_env'), else the Hub cache's copy of the Space.
    """
    folder = environment_folder(name)
    if folder is not None:
        return folder_info(folder), folder
    path = Path(name).expanduser()
    if path.is_dir() or name.startswith(("./", "../", "/", "~")):
        raise EnvironmentNotFoundError(
            f"{name!r} is not an environment folder: there is no {MANIFEST_NAME} in "
            f"{path.resolve()}. Create one with `openenv init NAME`.",
            name=name,
            installed=[],
        )
    if not is_hub_name(name):
        return find_environment(name, hint=hint), None
    repo_id = hub_repo_id(name)
    repo_name = repo_id.rpartition("/")[2]
    try:
        return find_environment(repo_name), None
    except EnvironmentNotFoundError:
        pass
    cached = cached_space(repo_id) if repo_id.count("/") == 1 else None
    if cached is not None:
        return folder_info(cached), cached
    raise HubUnavailableError(
        f"cannot use Hugging Face Hub repository {repo_id!r}: this openenv does not download or "
        "install code from the Hub, and no installed environment package "
        f"(openenv-{repo_name}) nor a copy in the local Hub cache was found. Install it "
        f"(pip install git+https://{_HUB_HOST}/spaces/{repo_id}), download it "
        f"(hf download {repo_id} --repo-type space --local-dir DIR) and pass DIR, or pass "
        "base_url= of a running server with skip_install=True." + (f" {hint}" if hint else ""),
        repo_id=repo_id,
    )
