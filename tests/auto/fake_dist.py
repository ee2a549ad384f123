"""Write installed-looking environment distributions into a folder on `sys.path`.

A wheel install is a package folder plus `<dist>-<version>.dist-info/` (METADATA, RECORD, maybe
top_level.txt); an editable one is a dist-info with `direct_url.json` pointing at the source.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

DEFAULT = "default"


def pascal(key: str) -> str:
    return "".join(part.capitalize() for part in key.split("_"))


def package_sources(key: str) -> dict[str, str]:
    """The files of a minimal typed environment package `<key>_env`."""
    name = pascal(key)
    return {
        "__init__.py": (
            f"from .client import {name}Env\nfrom .models import {name}Action, {name}Observation\n"
        ),
        "models.py": (
            "from openenv.core.env_server.types import Action, Observation\n\n\n"
            f"class {name}Action(Action):\n    value: int = 0\n\n\n"
            f"class {name}Observation(Observation):\n    value: int = 0\n"
        ),
        "client.py": (
            "from openenv.core import EnvClient\n"
            "from openenv.core.env_server.types import State\n\n"
            f"from .models import {name}Action, {name}Observation\n\n\n"
            f"class {name}Env(EnvClient[{name}Action, {name}Observation, State]):\n"
            "    pass\n"
        ),
    }


def manifest_text(key: str, description: str = "a fake environment") -> str:
    pkg, name = f"{key}_env", pascal(key)
    return (
        f"spec_version: 1\nname: {pkg}\ntype: space\nruntime: fastapi\n"
        f"app: {pkg}.server.app:app\nport: 8000\ndescription: {description}\n"
        f"client: {pkg}.client:{name}Env\naction: {pkg}.models:{name}Action\n"
        f"observation: {pkg}.models:{name}Observation\n"
    )


@dataclass
class FakeDist:
    package_dir: Path
    dist_info: Path

    def remove(self) -> None:
        shutil.rmtree(self.dist_info)
        shutil.rmtree(self.package_dir)


def write_distribution(
    site: Path,
    key: str,
    *,
    manifest: Optional[str] = DEFAULT,
    record: bool = True,
    top_level: bool = False,
    package: bool = True,
    editable_source: Optional[Path] = None,
) -> FakeDist:
    """Install `openenv-<key>` into `site`; with `editable_source` the package lives there."""
    pkg = f"{key}_env"
    text = manifest_text(key) if manifest == DEFAULT else manifest
    root = editable_source if editable_source is not None else site
    package_dir = root / pkg
    files: list[str] = []
    if package:
        package_dir.mkdir(parents=True)
        for filename, source in package_sources(key).items():
            (package_dir / filename).write_text(source)
            files.append(f"{pkg}/{filename}")
    if text is not None:
        if editable_source is not None:
            (editable_source / "openenv.yaml").write_text(text)  # the source folder's root
        else:
            (package_dir / "openenv.yaml").write_text(text)
            files.append(f"{pkg}/openenv.yaml")
    dist_info = site / f"openenv_{key}-0.1.0.dist-info"
    dist_info.mkdir()
    dist_name = "openenv-" + key.replace("_", "-")
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {dist_name}\nVersion: 0.1.0\nSummary: fake {key}\n"
    )
    if top_level:
        (dist_info / "top_level.txt").write_text(pkg + "\n")
    if editable_source is not None:
        (dist_info / "direct_url.json").write_text(
            json.dumps({"url": editable_source.as_uri(), "dir_info": {"editable": True}})
        )
        files = []
    if record:
        lines = [f"{f},," for f in files] + [f"{dist_info.name}/METADATA,,"]
        (dist_info / "RECORD").write_text("\n".join(lines) + "\n")
    return FakeDist(package_dir=package_dir, dist_info=dist_info)
