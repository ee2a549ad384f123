"""Find the environment packages installed in this interpreter (`openenv-*` distributions).

Each package's `openenv.yaml` is read without importing the package, because an environment may
pull in a heavy simulator just to be listed. Results are cached per process and keyed on a cheap
fingerprint of what is installed (the `openenv*` dist-info/egg-info entries on `sys.path` with
their modification times, and the manifests read), so a package installed or removed after the
first call is seen on the next one: a stale cache never hides a new package.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import importlib.util
import json
import os
import re
import sys
import threading
import warnings
from dataclasses import dataclass, field
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import Any, Optional
from urllib.parse import urlparse
from urllib.request import url2pathname

from openenv._install import (
    checkout_env_folder,
    checkout_env_keys,
    install_env_hint,
    pip_install,
    shown_path,
)
from openenv.core.manifest import (
    MANIFEST_NAME,
    EnvManifest,
    ManifestError,
    find_package_manifest,
    load_manifest,
)

from .errors import DiscoveryWarning, EnvironmentImportError, EnvironmentNotFoundError

DIST_PREFIX = "openenv-"
#: Distributions named like environments that are not environments.
EXCLUDED_DISTRIBUTIONS = frozenset({"openenv", "openenv-core"})
_METADATA_SUFFIXES = (".dist-info", ".egg-info")

#: (path of a dist-info/egg-info entry, its mtime in ns), in `sys.path` order
_Scan = tuple[tuple[str, int], ...]


def normalize_env_name(name: str) -> str:
    """The key every spelling maps to: 'openenv-Grid-World', 'grid_world_env' -> 'grid_world'."""
    key = re.sub(r"[-_.\s]+", "_", name.strip().lower()).strip("_")
    if key.startswith("openenv_") and len(key) > len("openenv_"):
        key = key[len("openenv_") :]
    if key.endswith("_env") and len(key) > len("_env"):
        key = key[: -len("_env")]
    return key


def canonical_distribution(name: str) -> str:
    """PEP 503 normalized distribution name ('OpenEnv_Echo' -> 'openenv-echo')."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _compact(key: str) -> str:
    return "~" + key.replace("_", "")


def _pascal(key: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in key.split("_") if part)


@dataclass(frozen=True)
class EnvInfo:
    """What discovery knows about one installed environment; classes are imported on demand."""

    env_key: str
    name: str
    distribution: str
    version: str
    description: str
    package: str
    client: str
    action: str
    observation: str
    default_image: str
    manifest_path: Optional[Path]
    spec_version: Optional[int] = None
    #: import strings guessed by convention, not declared in the manifest
    inferred: frozenset[str] = field(default=frozenset(), repr=False)

    def to_dict(self) -> dict[str, Any]:
        """Plain data, with the `*_class` and `module` keys OpenEnv's info dicts have too."""
        return {
            "env_key": self.env_key,
            "name": self.name,
            "distribution": self.distribution,
            "package": self.package,
            "module": self.client.partition(":")[0],  # OpenEnv's: the client's module
            "version": self.version,
            "description": self.description,
            "client": self.client,
            "action": self.action,
            "observation": self.observation,
            "env_class": self.client.rpartition(":")[2],
            "action_class": self.action.rpartition(":")[2],
            "observation_class": self.observation.rpartition(":")[2],
            "default_image": self.default_image,
            "manifest_path": str(self.manifest_path) if self.manifest_path else None,
            "spec_version": self.spec_version,
        }

    def load_client_class(self) -> type:
        return self._load("client")

    def load_action_class(self) -> type:
        return self._load("action")

    def load_observation_class(self) -> type:
        return self._load("observation")

    def _load(self, role: str) -> Any:
        target = getattr(self, role)
        module_name, _, attr = target.partition(":")
        # A guessed location may be wrong; the class may live in the package or its client.
        modules = [module_name]
        if role in self.inferred:
            modules += [m for m in (self.package, f"{self.package}.client") if m != module_name]
        problems = []
        for candidate in modules:
            try:
                module = importlib.import_module(candidate)
            except ImportError as exc:
                problems.append(f"cannot import {candidate}: {exc}")
                continue
            except Exception as exc:  # a module that fails while importing
                problems.append(f"importing {candidate} failed: {type(exc).__name__}: {exc}")
                continue
            value: Any = module
            try:
                for part in attr.split("."):
                    value = getattr(value, part)
            except AttributeError:
                problems.append(f"{candidate} has no attribute {attr!r}")
                continue
            return value
        where = f" ({self.manifest_path})" if self.manifest_path else ""
        hint = (
            f"declare it as '{role}: module:Class' in openenv.yaml{where}"
            if role in self.inferred
            else f"check the '{role}' key of openenv.yaml{where}"
        )
        folder = checkout_env_folder(self.env_key)
        reinstall = (
            f"{pip_install()} -e {shown_path(folder)}"
            if folder is not None
            else f"{self.distribution} from where it came, e.g. `{pip_install()} -e PATH`"
        )
        raise EnvironmentImportError(
            f"environment '{self.env_key}' ({self.distribution}): cannot load the {role} class "
            f"{target!r}: {'; '.join(problems)}. Reinstall the package with its dependencies "
            f"({reinstall}) or {hint}."
        )


@dataclass(frozen=True)
class Discovery:
    """One discovery pass: the environments found and the packages skipped, with reasons."""

    environments: dict[str, EnvInfo]
    #: distribution name -> why it was skipped
    skipped: dict[str, str]
    #: normalized spelling -> env_key
    aliases: dict[str, str]
    #: normalized spelling -> skipped distribution name
    skipped_aliases: dict[str, str]
    scan: _Scan = field(repr=False)
    #: files read, with their mtime (None when absent), that also key the cache
    watched: tuple[tuple[str, Optional[int]], ...] = field(repr=False)

    def resolve(self, name: str) -> Optional[EnvInfo]:
        normalized = normalize_env_name(name)
        key = self.aliases.get(normalized) or self.aliases.get(_compact(normalized))
        return self.environments.get(key) if key is not None else None


class _Skip(Exception):
    """An `openenv-*` distribution that cannot be used; the message is the reason."""

    def __init__(self, reason: str, manifest_path: Optional[Path] = None) -> None:
        super().__init__(reason)
        self.manifest_path = manifest_path


# -- fingerprint -------------------------------------------------------------------------------


def _scan_installed() -> _Scan:
    """The `openenv*` metadata entries on `sys.path`: listing a few folders, no file reads."""
    found: list[tuple[str, int]] = []
    for entry in sys.path:
        folder = entry or "."
        try:
            with os.scandir(folder) as items:
                for item in items:
                    lower = item.name.lower()
                    if lower.startswith("openenv") and lower.endswith(_METADATA_SUFFIXES):
                        try:
                            found.append((os.path.join(folder, item.name), item.stat().st_mtime_ns))
                        except OSError:
                            continue
        except OSError:  # a missing folder, a zip file, no permission
            continue
    return tuple(found)


def _mtime(path: str) -> Optional[int]:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def _is_fresh(cached: Discovery, scan: _Scan) -> bool:
    return cached.scan == scan and all(_mtime(p) == m for p, m in cached.watched)


_lock = threading.Lock()
_cached: Optional[Discovery] = None


def discover() -> Discovery:
    """Installed environments, rediscovered whenever what is installed has changed."""
    global _cached
    with _lock:
        scan = _scan_installed()
        if _cached is not None and _is_fresh(_cached, scan):
            return _cached
        # Packages may have been installed since the import system listed these folders.
        importlib.invalidate_caches()
        _cached = _discover(scan)
        return _cached


def find_environment(name: str, hint: str = "") -> EnvInfo:
    """The installed environment answering to `name`, or a typed error listing what there is."""
    found = discover()
    info = found.resolve(name)
    if info is not None:
        return info
    installed = sorted(found.environments)
    key = normalize_env_name(name)
    skipped = found.skipped_aliases.get(key)
    if skipped is not None:
        message = (
            f"environment {name!r} is installed ({skipped}) but was skipped: "
            f"{found.skipped[skipped]}. Fix the package's openenv.yaml and try again."
        )
    else:
        listing = ", ".join(installed) if installed else "none"
        message = f"no installed environment named {name!r} (installed: {listing}). "
        if checkout_env_folder(key) is not None:
            message += f"It is in this checkout: install it with {install_env_hint(key)}."
        else:
            message += f"Install it with {install_env_hint(key)}."
            available = [k for k in checkout_env_keys() if k not in found.environments]
            if available:
                message += f" Not installed yet, in this checkout's envs/: {', '.join(available)}."
        if "/" in name:
            message += " Hugging Face Hub repositories are not installed automatically yet."
    if hint:
        message += " " + hint
    raise EnvironmentNotFoundError(message, name=name, installed=installed)


# -- one pass ------------------------------------------------------------------------------------


def _discover(scan: _Scan) -> Discovery:
    environments: dict[str, EnvInfo] = {}
    skipped: dict[str, str] = {}
    aliases: dict[str, str] = {}
    skipped_aliases: dict[str, str] = {}
    watched: list[tuple[str, Optional[int]]] = []
    seen: set[str] = set()
    for path, _ in scan:
        dist = md.PathDistribution(Path(path))
        raw_name = dist.metadata["Name"] if dist.metadata is not None else None
        if not raw_name:
            continue  # no METADATA: a half-removed install
        dist_name = canonical_distribution(raw_name)
        if not dist_name.startswith(DIST_PREFIX) or dist_name in EXCLUDED_DISTRIBUTIONS:
            continue
        if dist_name in seen:
            continue  # shadowed by an earlier sys.path entry, as for imports
        seen.add(dist_name)
        manifest_path: Optional[Path] = None
        try:
            info = _inspect(dist, dist_name)
            manifest_path = info.manifest_path
        except _Skip as exc:
            reason = str(exc)
            manifest_path = exc.manifest_path
            skipped[dist_name] = reason
            for alias in (dist_name, dist_name[len(DIST_PREFIX) :]):
                skipped_aliases.setdefault(normalize_env_name(alias), dist_name)
            warnings.warn(
                f"skipping environment package {dist_name}: {reason}",
                DiscoveryWarning,
                stacklevel=2,
            )
        else:
            if info.env_key in environments:
                other = environments[info.env_key].distribution
                warnings.warn(
                    f"skipping environment package {dist_name}: environment "
                    f"'{info.env_key}' is already provided by {other}",
                    DiscoveryWarning,
                    stacklevel=2,
                )
            else:
                environments[info.env_key] = info
                for alias in (info.env_key, info.name, info.distribution, info.package):
                    aliases.setdefault(normalize_env_name(alias), info.env_key)
                # 'GridWorld' and 'gridworld' for 'grid_world'; exact spellings win.
                aliases.setdefault(_compact(info.env_key), info.env_key)
        # An editable source folder may gain a manifest later: watch it even while absent.
        source = _editable_source(dist)
        candidates = (manifest_path, source / MANIFEST_NAME if source else None)
        for path in dict.fromkeys(str(p) for p in candidates if p is not None):
            watched.append((path, _mtime(path)))
    return Discovery(
        environments=environments,
        skipped=skipped,
        aliases=aliases,
        skipped_aliases=skipped_aliases,
        scan=scan,
        watched=tuple(watched),
    )


def _inspect(dist: md.Distribution, dist_name: str) -> EnvInfo:
    candidates = _package_candidates(dist, dist_name)
    manifest_path = _find_manifest(dist, candidates)
    manifest: Optional[EnvManifest] = None
    if manifest_path is not None:
        try:
            manifest = load_manifest(manifest_path)
        except ManifestError as exc:
            raise _Skip(str(exc), manifest_path) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise _Skip(f"cannot read {manifest_path}: {exc}") from None
        package = _package_from_app(manifest.app) or candidates[0]
        raw_name = manifest.name
    else:
        package = next((c for c in candidates if _find_spec(c) is not None), "")
        if not package:
            raise _Skip(
                f"it has no {MANIFEST_NAME} and none of the packages {', '.join(candidates)} "
                "can be imported"
            )
        raw_name = dist_name[len(DIST_PREFIX) :]
    key = normalize_env_name(raw_name)
    if not key:
        raise _Skip(f"{manifest_path}: 'name' is empty", manifest_path)
    return env_info(
        key,
        package,
        manifest,
        distribution=dist_name,
        version=dist.version or (manifest.version if manifest else None) or "0.0.0",
        description=(manifest.description if manifest else None) or dist.metadata["Summary"] or "",
        manifest_path=manifest_path,
    )


def env_info(
    key: str,
    package: str,
    manifest: Optional[EnvManifest],
    *,
    distribution: str,
    version: str,
    description: str,
    manifest_path: Optional[Path],
) -> EnvInfo:
    """What is known of environment `key` whose import package is `package`: the manifest's
    `module:Class` strings, else OpenEnv's naming convention (`EchoEnv` in `client`, ...)."""
    pascal = _pascal(key)
    inferred: set[str] = set()

    def import_string(value: Optional[str], role: str, module: str, default: str) -> str:
        if value and ":" in value:
            return value
        inferred.add(role)  # a bare class name (OpenEnv's legacy form) or nothing at all
        return f"{package}.{module}:{value or default}"

    return EnvInfo(
        env_key=key,
        name=f"{key}_env",
        distribution=distribution,
        version=version,
        description=description,
        package=package,
        client=import_string(
            manifest.client if manifest else None, "client", "client", f"{pascal}Env"
        ),
        action=import_string(
            manifest.action if manifest else None, "action", "models", f"{pascal}Action"
        ),
        observation=import_string(
            manifest.observation if manifest else None,
            "observation",
            "models",
            f"{pascal}Observation",
        ),
        default_image=f"openenv-{key.replace('_', '-')}:latest",
        manifest_path=manifest_path,
        spec_version=manifest.spec_version if manifest else None,
        inferred=frozenset(inferred),
    )


def _package_candidates(dist: md.Distribution, dist_name: str) -> list[str]:
    """Import packages the distribution may hold: top_level.txt, its files, the convention."""
    names: list[str] = []
    top_level = dist.read_text("top_level.txt")
    if top_level:
        names += [line.strip() for line in top_level.splitlines() if line.strip()]
    for file in dist.files or ():
        parts = file.parts
        if len(parts) > 1 and parts[0] != ".." and not parts[0].endswith(_METADATA_SUFFIXES):
            names.append(parts[0])
    stem = dist_name[len(DIST_PREFIX) :].replace("-", "_")
    names.append(stem if stem.endswith("_env") else f"{stem}_env")
    unique = [n for n in dict.fromkeys(names) if n.isidentifier() and n != "__pycache__"]
    return unique


def _find_manifest(dist: md.Distribution, candidates: list[str]) -> Optional[Path]:
    # 1. An editable install reads the source folder, never a copy made at install time.
    source = _editable_source(dist)
    if source is not None:
        for path in (source / MANIFEST_NAME, *(source / c / MANIFEST_NAME for c in candidates)):
            if path.is_file():
                return path
    # 2. A wheel install lists `<package>/openenv.yaml` in RECORD.
    listed = [f for f in dist.files or () if len(f.parts) == 2 and f.parts[1] == MANIFEST_NAME]
    listed.sort(key=lambda f: f.parts[0] not in candidates)
    for file in listed:
        path = Path(str(dist.locate_file(file)))
        if path.is_file():
            return path
    # 3. Wherever the package imports from: inside it, or beside it (a source checkout).
    for candidate in candidates:
        found = find_package_manifest(candidate)
        if found is not None:
            return found
    return None


def _editable_source(dist: md.Distribution) -> Optional[Path]:
    text = dist.read_text("direct_url.json")
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or not (data.get("dir_info") or {}).get("editable"):
        return None
    url = urlparse(str(data.get("url", "")))
    if url.scheme != "file":
        return None
    return Path(url2pathname(url.path))


def _package_from_app(app: str) -> Optional[str]:
    """'echo_env.server.app:app' -> 'echo_env'; None for OpenEnv's folder-relative 'server.app'."""
    top = app.partition(":")[0].partition(".")[0]
    return top if top.isidentifier() and top != "server" else None


def _find_spec(name: str) -> Optional[ModuleSpec]:
    """Locate a top-level package without importing it."""
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
