"""What to start: `EnvSpec`, with its resource limits and network policy.

A spec names its target the way a user does (an installed environment, a folder, a Docker
image) and is resolved once into what a provider needs: an app import string, the folder to
import it from, or an image. Providers read the spec; none of them guesses from strings.
"""

from __future__ import annotations

import contextlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

from openenv.core.errors import OpenEnvError
from openenv.isolation.limits import ResourceLimits

#: "none": the environment reaches no network; the trainer talks to it over a Unix socket.
#: "egress": the environment may open connections; the trainer reaches it on a loopback port.
NetworkPolicy = Literal["none", "egress"]


class SpecError(OpenEnvError, ValueError):
    """A spec names nothing that can be started, or asks for what the provider cannot give."""

    category = "client"


__all__ = ["AppTarget", "EnvSpec", "NetworkPolicy", "ResourceLimits", "SpecError", "resolve_app"]


class EnvSpec(BaseModel):
    """One environment to start.

    `target` is an installed environment's name (`"echo"`), an environment folder (a path
    holding `openenv.yaml`), an app import string (`"echo_env.server.app:app"`) or, for the
    container providers, a Docker image (`"openenv-echo:latest"`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    target: str
    env_vars: dict[str, str] = Field(default_factory=dict)
    limits: ResourceLimits = Field(default_factory=lambda: ResourceLimits())
    #: None: the provider's default (see `docs/providers.md`).
    network: Optional[NetworkPolicy] = None
    #: A host port to use; None picks a free one (no race: the server binds it itself).
    port: Optional[int] = Field(None, ge=0, le=65535)
    #: Seconds to wait for `/health` after start.
    ready_timeout_s: float = Field(60.0, gt=0)

    @field_validator("env_vars")
    @classmethod
    def _string_values(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not key or "=" in key or "\0" in key:
                raise ValueError(f"invalid environment variable name {key!r}")
        return value

    @classmethod
    def of(cls, target: str | EnvSpec, **fields: object) -> EnvSpec:
        """A spec from a target string (or an existing spec with fields replaced)."""
        if isinstance(target, EnvSpec):
            return target.model_copy(update=fields) if fields else target
        limits = fields.pop("limits", None)
        if isinstance(limits, dict):
            fields["limits"] = ResourceLimits(**limits)
        elif limits is not None:
            fields["limits"] = limits
        return cls(target=target, **fields)  # type: ignore[arg-type]


@dataclass(frozen=True)
class AppTarget:
    """An ASGI app to serve: its import string and the folder to import it from, if any."""

    app: str
    root: Optional[Path] = None
    name: str = ""


def resolve_app(target: str) -> AppTarget:
    """The app behind an environment name, folder or import string; `SpecError` otherwise."""
    from openenv.core.manifest import ManifestError, is_flat_app, load_manifest, load_project

    path = Path(target).expanduser()
    if path.is_dir():
        try:
            project = load_project(path)
        except ManifestError as exc:
            raise SpecError(
                f"{exc}. Run `openenv init NAME` to create an environment folder."
            ) from None
        return AppTarget(project.manifest.app, project.root, project.manifest.env_key)
    if ":" in target and "/" not in target:
        return AppTarget(target, Path.cwd(), target.split(".", 1)[0])
    from openenv.auto import discover

    info = discover().resolve(target)
    if info is not None:
        if info.manifest_path is not None:
            with contextlib.suppress(ManifestError):
                app = load_manifest(info.manifest_path).app
                if is_flat_app(app):  # OpenEnv's flat layout, installed as `info.package`
                    app = f"{info.package}.{app}"
                return AppTarget(app, None, info.env_key)
        return AppTarget(f"{info.package}.server.app:app", None, info.env_key)
    if "/" not in target and importlib.util.find_spec(target.split(".", 1)[0]) is not None:
        return AppTarget(f"{target}.server.app:app", None, target)
    raise SpecError(
        f"'{target}' is neither an environment folder nor an installed environment. Pass a "
        "folder with openenv.yaml, an environment name such as 'echo' (see `openenv list`), "
        "or an import string such as 'echo_env.server.app:app'."
    )
