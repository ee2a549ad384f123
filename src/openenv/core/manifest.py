"""An environment project on disk: its `openenv.yaml` manifest and its `pyproject.toml`.

The CLI (serve, validate, build, push) and discovery all need the same facts about an
environment folder; this module reads them once, with errors that say which file is wrong.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

MANIFEST_NAME = "openenv.yaml"
DEFAULT_PORT = 8000


class ManifestError(ValueError):
    """An environment folder or its manifest is missing or malformed."""


class EnvManifest(BaseModel):
    """The keys of `openenv.yaml`; unknown keys are kept, as OpenEnv tools add their own."""

    model_config = ConfigDict(extra="allow")

    spec_version: int = 1
    name: str
    type: str = "space"
    runtime: str = "fastapi"
    app: str = Field(description="Import string of the ASGI app, 'package.server.app:app'.")
    port: int = DEFAULT_PORT
    version: Optional[str] = None
    description: Optional[str] = None
    client: Optional[str] = Field(None, description="'module:Class' of the typed client.")
    action: Optional[str] = Field(None, description="'module:Class' (or class name) of the action.")
    observation: Optional[str] = None
    variables: dict[str, str] = Field(default_factory=dict)

    @property
    def env_key(self) -> str:
        """The short name users type: 'echo' for 'echo_env'."""
        return self.name[: -len("_env")] if self.name.endswith("_env") else self.name


def parse_manifest(text: str, source: str = MANIFEST_NAME) -> EnvManifest:
    """Parse manifest text; `source` names the file in error messages."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ManifestError(f"{source} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ManifestError(f"{source} must be a mapping of keys, got {type(data).__name__}")
    if "variables" in data and data["variables"] is not None:
        if not isinstance(data["variables"], dict):
            raise ManifestError(f"{source}: 'variables' must be a mapping of NAME: value")
        data["variables"] = {str(k): str(v) for k, v in data["variables"].items()}
    try:
        return EnvManifest.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(root)'}: {err['msg']}"
            for err in exc.errors()
        )
        raise ManifestError(f"{source}: {problems}") from None


def load_manifest(path: Path) -> EnvManifest:
    """Read `openenv.yaml` from a file or from the folder that holds it."""
    path = Path(path)
    if path.is_dir():
        path = path / MANIFEST_NAME
    if not path.is_file():
        raise ManifestError(f"no {MANIFEST_NAME} in {path.parent}: is this an environment folder?")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    return parse_manifest(text, str(path))


def find_package_manifest(package: str) -> Optional[Path]:
    """The `openenv.yaml` of import package `package`, found without importing it.

    A wheel carries it inside the package (`echo_env/openenv.yaml`); a source checkout or an
    editable install has it beside the package, in the environment folder.
    """
    try:
        spec = importlib.util.find_spec(package.partition(".")[0])
    except (ImportError, ValueError):
        return None
    for location in (spec.submodule_search_locations or []) if spec else []:
        for path in (Path(location) / MANIFEST_NAME, Path(location).parent / MANIFEST_NAME):
            if path.is_file():
                return path
    return None


@functools.cache
def package_manifest(module: str) -> Optional[EnvManifest]:
    """The manifest of the environment that module `module` belongs to, if it has one.

    A manifest beside the package counts only when its `app` names that package, so that a
    folder's unrelated `openenv.yaml` is never taken for it. Malformed manifests raise.
    """
    package = module.partition(".")[0]
    path = find_package_manifest(package)
    if path is None:
        return None
    manifest = load_manifest(path)
    if manifest.app.partition(":")[0].partition(".")[0] == package:
        return manifest
    # OpenEnv's flat layout names its app from inside the package folder ('server.app:app').
    spec = importlib.util.find_spec(package)
    inside = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    return manifest if is_flat_app(manifest.app) and path.parent in inside else None


_FRONT_MATTER = re.compile(r"\A(?:\ufeff)?---[ \t]*\r?\n(.*?)^---[ \t]*(?:\r?\n|\Z)", re.S | re.M)
_FRONT_MATTER_START = re.compile(r"\A(?:\ufeff)?---[ \t]*\r?$", re.M)


def split_front_matter(text: str) -> tuple[Optional[dict[str, Any]], str]:
    """(front matter, body) of a README, the body byte for byte; (None, text) without one.

    The front matter is the YAML block between leading `---` lines: a Hugging Face Space
    card. Raises ValueError when the block is unclosed, not YAML, or not a mapping.
    """
    match = _FRONT_MATTER.match(text)
    if match is None:
        if _FRONT_MATTER_START.match(text):
            raise ValueError("the front matter that starts with '---' has no closing '---'")
        return None, text
    try:
        data = yaml.safe_load(match.group(1))
    except yaml.YAMLError as exc:
        raise ValueError(f"the front matter is not valid YAML: {exc}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ValueError("the front matter must be a mapping of keys (`sdk: docker`)")
    return data, text[match.end() :]


_DIST_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")


@dataclass(frozen=True)
class EnvProject:
    """An environment folder: `openenv.yaml`, `pyproject.toml` and the Python package."""

    root: Path
    manifest: EnvManifest
    pyproject: dict[str, Any] = field(repr=False)

    @property
    def dist_name(self) -> str:
        """Distribution name from `pyproject.toml` ('openenv-echo')."""
        return str(self.pyproject.get("project", {}).get("name", ""))

    @property
    def version(self) -> str:
        """`[project] version`, else the manifest's (where a dynamic version comes from)."""
        version = self.pyproject.get("project", {}).get("version") or self.manifest.version
        return str(version or "0.0.0")

    @property
    def flat(self) -> bool:
        """OpenEnv's flat layout: the folder itself is the package (`app: server.app:app`)."""
        return is_flat_app(self.manifest.app)

    @property
    def package(self) -> str:
        """Top-level import package of the installed environment ('echo_env')."""
        if self.flat:
            return flat_package_name(self.root, self.pyproject)
        return self.manifest.app.split(":", 1)[0].split(".", 1)[0]

    @property
    def package_dir(self) -> Path:
        """The folder holding the package's `__init__.py`, `client.py` and `server/`."""
        return self.root if self.flat else self.root / self.package

    @property
    def app_module(self) -> str:
        """The app's module once installed: 'echo_env.server.app' in either layout."""
        module = self.manifest.app.split(":", 1)[0]
        return f"{self.package}.{module}" if self.flat else module

    @property
    def scripts(self) -> dict[str, str]:
        return dict(self.pyproject.get("project", {}).get("scripts", {}) or {})

    @property
    def dependencies(self) -> list[str]:
        return list(self.pyproject.get("project", {}).get("dependencies", []) or [])

    @property
    def dockerfile(self) -> Optional[Path]:
        return own_dockerfile(self.root)

    @property
    def image_name(self) -> str:
        """Default image tag: 'openenv-echo' for 'echo_env'."""
        return "openenv-" + self.manifest.env_key.replace("_", "-")


def is_flat_app(app: str) -> bool:
    """Whether `app` is folder-relative, as in OpenEnv's flat layout ('server.app:app'), where
    the environment folder itself is the package and is served from inside it."""
    return app.partition(":")[0].partition(".")[0] == "server"


def flat_package_name(root: Path, pyproject: dict[str, Any]) -> str:
    """The import name a flat-layout folder installs as.

    The `[tool.setuptools] package-dir` entry that maps to the folder itself ('.'), as
    OpenEnv's template writes it; else the distribution name without 'openenv-'; else the
    folder's name.
    """
    setuptools = pyproject.get("tool", {}).get("setuptools", {})
    package_dir = setuptools.get("package-dir") if isinstance(setuptools, dict) else None
    if isinstance(package_dir, dict):
        for name, where in package_dir.items():
            if str(where).strip() in (".", "./", "") and str(name).isidentifier():
                return str(name)
    dist = str(pyproject.get("project", {}).get("name", ""))
    stem = re.sub(r"[-.]+", "_", dist.lower())
    stem = stem[len("openenv_") :] if stem.startswith("openenv_") else stem
    if stem.isidentifier() and stem != "server":
        return stem
    return re.sub(r"\W", "_", root.name)


def load_project(path: Path) -> EnvProject:
    """Read an environment folder; raises `ManifestError` saying what is missing."""
    root = Path(path).resolve()
    if not root.is_dir():
        raise ManifestError(f"{root} is not a folder")
    manifest = load_manifest(root)
    pyproject_path = root / "pyproject.toml"
    if not pyproject_path.is_file():
        raise ManifestError(f"no pyproject.toml in {root}: an environment must be a package")
    try:
        pyproject = tomllib.loads(pyproject_path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"{pyproject_path} is not valid TOML: {exc}") from None
    name = pyproject.get("project", {}).get("name")
    if not isinstance(name, str) or not _DIST_NAME.match(name):
        raise ManifestError(f"{pyproject_path}: [project] name is missing or invalid")
    if ":" not in manifest.app:
        raise ManifestError(
            f"{root / MANIFEST_NAME}: app must be an import string 'module:attribute', "
            f"got {manifest.app!r}"
        )
    return EnvProject(root=root, manifest=manifest, pyproject=pyproject)


def own_dockerfile(root: Path) -> Optional[Path]:
    """The Dockerfile an environment folder ships to replace the generated one: `Dockerfile`
    at the root, else `server/Dockerfile` (OpenEnv's layout); None when it ships none."""
    for candidate in (root / "Dockerfile", root / "server" / "Dockerfile"):
        if candidate.is_file():
            return candidate
    return None
