"""The default base image, `openenv-base`, made locally: no registry has to be reachable.

`debootstrap` writes a minimal Debian root file system with Python into a folder and
`docker import` turns it into an image. The image is labelled with its Python version, which
`openenv build` needs to collect wheels that fit it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Optional

from rich.text import Text

from ._output import console

DEFAULT_SUITE = "bookworm"
PYTHON_LABEL = "org.openenv.python"
#: The Debian packages a base image was made with; one made with other packages is remade.
PACKAGES_LABEL = "org.openenv.packages"
_PACKAGES = ("python3", "python3-venv", "ca-certificates", "git", "make")
# Files a container never needs; removing them halves the image.
_PRUNE = ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man")


class BaseImageError(RuntimeError):
    """The base image could not be made; the message says what to install or change."""


def apt_mirror(suite: str, sources_dir: Path = Path("/etc/apt")) -> Optional[str]:
    """The Debian mirror this machine's apt already uses for `suite`, if any.

    Reusing it means the base image comes from wherever this machine is allowed to fetch
    packages; with none found, debootstrap uses its own default.
    """
    uris: list[str] = []
    deb822 = sorted((sources_dir / "sources.list.d").glob("*.sources"))
    for path in deb822:
        for stanza in path.read_text(encoding="utf-8", errors="replace").split("\n\n"):
            fields = dict(
                line.split(":", 1) for line in stanza.splitlines() if re.match(r"^\w[\w-]*:", line)
            )
            if suite in fields.get("Suites", "").split() and "deb" in fields.get("Types", ""):
                uris.extend(fields.get("URIs", "").split())
    legacy = [
        sources_dir / "sources.list",
        *sorted((sources_dir / "sources.list.d").glob("*.list")),
    ]
    for path in legacy:
        if not path.is_file():
            continue
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            parts = re.sub(r"\[[^]]*\]", "", line).split()
            if len(parts) >= 3 and parts[0] == "deb" and parts[2] == suite:
                uris.append(parts[1])
    for uri in uris:
        if "security" not in uri:
            return uri.rstrip("/")
    return None


def _python_version(rootfs: Path) -> str:
    for candidate in sorted((rootfs / "usr" / "bin").glob("python3.*"), reverse=True):
        match = re.fullmatch(r"python(3\.\d+)", candidate.name)
        if match:
            return match.group(1)
    raise BaseImageError(f"no Python in the root file system at {rootfs}")


def packages_changed(client: Any, tag: str) -> bool:
    """Whether the image `tag` was made with other packages than a base image gets now (e.g.
    before git was added), so an environment needing one of them would not find it."""
    labels = client.images.get(tag).labels or {}
    return bool(labels.get(PACKAGES_LABEL) != ",".join(_PACKAGES))


def image_exists(client: Any, tag: str) -> bool:
    import docker.errors

    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def build_base_image(
    client: Any, tag: str, *, suite: str = DEFAULT_SUITE, mirror: Optional[str] = None
) -> str:
    """Make the base image `tag` with the Docker `client`; returns its Python version."""
    if shutil.which("debootstrap") is None:
        raise BaseImageError(
            "debootstrap is needed to make the base image: `apt-get install debootstrap`, "
            "or pass --base-image with an image you already have that has python3 and venv."
        )
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        raise BaseImageError("debootstrap must run as root to make the base image; use sudo.")
    mirror = mirror or apt_mirror(suite)
    with tempfile.TemporaryDirectory(prefix="openenv-rootfs-") as work:
        rootfs = Path(work) / "rootfs"
        command = ["debootstrap", "--variant=minbase", f"--include={','.join(_PACKAGES)}"]
        command += [suite, str(rootfs)] + ([mirror] if mirror else [])
        with console.status(
            Text(f"Writing a Debian {suite} root file system with Python")
        ) as status:
            process = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
            assert process.stdout is not None
            lines: list[str] = []
            for line in process.stdout:
                lines.append(line.rstrip())
                status.update(Text(f"debootstrap: {line.strip()[:80]}"))
            if process.wait() != 0:
                raise BaseImageError("debootstrap failed:\n" + "\n".join(lines[-15:]))
        for relative in _PRUNE:
            target = rootfs / relative
            if target.is_dir():
                shutil.rmtree(target)
                target.mkdir(parents=True)
        python = _python_version(rootfs)
        changes = [
            "ENV LANG=C.UTF-8",
            'CMD ["python3"]',
            f"LABEL {PYTHON_LABEL}={python}",
            f"LABEL {PACKAGES_LABEL}={','.join(_PACKAGES)}",
        ]
        repository, _, version = tag.partition(":")
        with console.status(Text(f"Importing the root file system as {tag}")):
            tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
            try:
                client.api.import_image_from_stream(
                    tar.stdout, repository=repository, tag=version or "latest", changes=changes
                )
            finally:
                tar.wait()
        if tar.returncode != 0 or not image_exists(client, tag):
            raise BaseImageError(f"importing the root file system as {tag} failed")
    return python
