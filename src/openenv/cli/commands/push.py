"""`openenv push`: publish an environment folder as a Hugging Face Docker Space.

The folder is staged first (`openenv.cli.staging`): `--dry-run` stops there and shows the plan,
a real push uploads exactly that folder. The Hub helpers here (token, repo ids, error messages)
are shared with `openenv fork`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional

import typer
from rich.markup import escape
from rich.text import Text

from openenv.core.manifest import EnvProject, ManifestError, load_project

from .._output import console, fail, success, warn

#: Shown in a dry run's repo id where the Hub would have said who you are.
USER_PLACEHOLDER = "<your-hf-username>"
PLAN_FILE = "openenv-push.json"
LOGIN_HINT = (
    "Log in with `hf auth login` (older huggingface_hub: `huggingface-cli login`), or set "
    "HF_TOKEN to a token with write access from https://huggingface.co/settings/tokens."
)
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HTTP_LIBRARIES = frozenset({"httpx", "httpx2", "httpcore", "requests", "urllib3"})


# -- shared with `openenv fork` ----------------------------------------------------------


def parse_pairs(values: Optional[Sequence[str]], option: str, *, from_env: bool = False) -> dict:
    """`KEY=VALUE` options as a dict (exit 2 on a malformed one).

    With `from_env`, a bare `KEY` takes its value from this process's environment, so that
    secrets need not appear on the command line (and in shell history).
    """
    pairs: dict[str, str] = {}
    for raw in values or ():
        key, sep, value = raw.partition("=")
        key = key.strip()
        if not sep:
            if from_env and key in os.environ:
                value = os.environ[key]
            elif from_env:
                fail(
                    f"{option} {key}: no value given and no environment variable {key} is set",
                    f"Pass {option} {key}=VALUE, or export {key} first.",
                    code=2,
                )
            else:
                fail(f"{option} expects KEY=VALUE, got {raw!r}", code=2)
        if not _KEY.match(key):
            fail(
                f"{option} {key!r}: a name must be letters, digits and '_', not starting "
                "with a digit",
                code=2,
            )
        pairs[key] = value
    return pairs


def check_repo_id(repo_id: str, option: str = "--repo-id") -> None:
    """Refuse (exit 2) an id the Hub would refuse, before any work is done."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    if repo_id.count("/") > 1:
        fail(
            f"{option} {repo_id!r} has more than one '/'",
            "Use NAME or OWNER/NAME, e.g. 'my-env' or 'my-org/my-env'.",
            code=2,
        )
    try:
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        fail(f"{option} {repo_id!r} is not a valid repository id: {exc}", code=2)


def require_token() -> str:
    """The token huggingface_hub would use (HF_TOKEN, then the cached login); exit 1 if none."""
    from huggingface_hub import get_token

    token = get_token()
    if not token:
        fail("no Hugging Face token found: the Hub needs one to create Spaces", LOGIN_HINT)
    return token


def hub_endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT.rstrip("/")


def space_url(repo_id: str) -> str:
    return f"{hub_endpoint()}/spaces/{repo_id}"


def _is_network_error(exc: BaseException) -> bool:
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    return any(cls.__module__.split(".")[0] in _HTTP_LIBRARIES for cls in type(exc).__mro__)


@contextmanager
def hub_errors(action: str, repo_id: Optional[str] = None) -> Iterator[None]:
    """Turn a failed Hub call into an error that says what failed and what to do (exit 1)."""
    from huggingface_hub.errors import (
        HfHubHTTPError,
        LocalTokenNotFoundError,
        OfflineModeIsEnabled,
    )

    try:
        yield
    except typer.Exit:
        raise
    except LocalTokenNotFoundError:
        fail(f"{action} failed: no Hugging Face token found", LOGIN_HINT)
    except OfflineModeIsEnabled:
        fail(f"{action} failed: HF_HUB_OFFLINE is set", "Unset HF_HUB_OFFLINE and try again.")
    except HfHubHTTPError as exc:
        response = getattr(exc, "response", None)
        status = getattr(response, "status_code", None)
        detail = getattr(exc, "server_message", None) or str(exc).splitlines()[0]
        where = f" ({repo_id})" if repo_id else ""
        if status == 401:
            fail(f"{action} failed: the Hub rejected your token ({detail})", LOGIN_HINT)
        if status == 403:
            fail(
                f"{action} failed: your token may not write to this repository{where}",
                "Use a token with write access, or a repo id in a namespace you own.",
            )
        if status == 404:
            fail(
                f"{action} failed: repository not found{where}",
                "Check the repo id (OWNER/NAME), and that your token can see it if it is private.",
            )
        if status == 409:
            fail(
                f"{action} failed: the repository already exists{where}",
                "Choose another name with --repo-id.",
            )
        fail(f"{action} failed: HTTP {status}: {detail}")
    except Exception as exc:
        if _is_network_error(exc):
            fail(
                f"{action} failed: could not reach the Hugging Face Hub at {hub_endpoint()} "
                f"({type(exc).__name__}: {exc})",
                "Check your network connection (and HF_ENDPOINT, if you set it), then retry.",
            )
        fail(f"{action} failed: {type(exc).__name__}: {exc}")


def hub_user(api: Any) -> str:
    """The user name of the token, for default and bare repo ids."""
    with hub_errors("Checking your Hugging Face token"):
        return str(api.whoami()["name"])


def full_repo_id(repo_id: str, user: str) -> str:
    """`name` → `user/name`; `owner/name` is kept."""
    return repo_id if "/" in repo_id else f"{user}/{repo_id}"


# -- push -------------------------------------------------------------------------------------


def _load(path: Path) -> EnvProject:
    try:
        return load_project(path)
    except ManifestError as exc:
        fail(str(exc), "Pass an environment folder (one with openenv.yaml and pyproject.toml).", 2)


def _check_flags(create_pr: bool, private: bool, hardware: Optional[str], settings: bool) -> None:
    if not create_pr:
        return
    refused = [
        flag
        for flag, given in (
            ("--env-var/--secret", settings),
            ("--private", private),
            ("--hardware", hardware is not None),
        )
        if given
    ]
    if refused:
        fail(
            f"--create-pr cannot be combined with {', '.join(refused)}",
            "A pull request only proposes files to an existing Space; change its settings with "
            "a push without --create-pr.",
            code=2,
        )


def _stage(project: EnvProject, dest: Path, **options: Any) -> Any:
    from ..staging import StagingError, stage_space
    from ..wheels import WheelError

    try:
        with console.status(Text(f"Staging {project.manifest.name}: building the wheels")):
            staged = stage_space(project, dest, **options)
    except StagingError as exc:
        fail(str(exc), code=2)
    except WheelError as exc:
        fail(str(exc), "Fix the build error above (`uv build --wheel` in the folder shows it).")
    for note in staged.notes:
        warn(note)
    return staged


def _upload(
    api: Any,
    repo_id: str,
    folder: Path,
    *,
    private: bool,
    hardware: Optional[str],
    create_pr: bool,
    variables: dict[str, str],
    secrets: dict[str, str],
    count: int,
    name: str,
) -> Optional[str]:
    """Create the Space, upload the staged folder, then set its settings; returns a PR URL."""
    if not create_pr:
        with (
            console.status(Text(f"Creating Space {repo_id}")),
            hub_errors("Creating the Space", repo_id),
        ):
            api.create_repo(
                repo_id,
                repo_type="space",
                space_sdk="docker",
                private=private or None,
                exist_ok=True,
                space_hardware=hardware,
            )
            if hardware:  # create_repo does not change the hardware of an existing Space
                api.request_space_hardware(repo_id, hardware)
    with (
        console.status(Text(f"Uploading {count} files to {repo_id}")),
        hub_errors("Uploading the files", repo_id),
    ):
        info = api.upload_folder(
            repo_id=repo_id,
            folder_path=str(folder),
            repo_type="space",
            create_pr=create_pr,
            commit_message=f"Push {name} with openenv",
            # Wheels are named by version: old ones would be installed next to the new ones.
            delete_patterns=["wheels/*.whl"],
        )
    if create_pr:
        return getattr(info, "pr_url", None)
    with console.status("Setting the Space's variables and secrets"):
        for key, value in variables.items():
            with hub_errors(f"Setting variable {key}", repo_id):
                api.add_space_variable(repo_id, key, value)
        for key, value in secrets.items():
            with hub_errors(f"Setting secret {key}", repo_id):
                api.add_space_secret(repo_id, key, value)
    return None


def register(app: typer.Typer) -> None:
    """Add the command to the app."""

    @app.command()
    def push(
        path: Path = typer.Argument(Path("."), help="Environment folder (default: this one)."),
        repo_id: Optional[str] = typer.Option(
            None,
            "--repo-id",
            "-r",
            help="Space id, OWNER/NAME or NAME (default: <your user>/<manifest name>).",
        ),
        base_image: Optional[str] = typer.Option(
            None, "--base-image", "-b", help="Base image of the Space (default: python:3.11-slim)."
        ),
        private: bool = typer.Option(False, "--private", help="Create the Space private."),
        create_pr: bool = typer.Option(
            False, "--create-pr", help="Open a pull request on an existing Space instead."
        ),
        exclude: Optional[Path] = typer.Option(
            None, "--exclude", help="File of patterns (one a line, gitignore style) to leave out."
        ),
        hardware: Optional[str] = typer.Option(
            None, "--hardware", "-H", help="Space hardware, e.g. cpu-basic, t4-small."
        ),
        env_vars: Optional[list[str]] = typer.Option(
            None,
            "--env-var",
            "-e",
            metavar="KEY=VALUE",
            help="Space variable (repeatable); adds to and overrides openenv.yaml `variables`.",
        ),
        secrets: Optional[list[str]] = typer.Option(
            None,
            "--secret",
            "-s",
            metavar="KEY[=VALUE]",
            help="Space secret (repeatable); KEY alone reads the value from your environment. "
            "Values are never printed.",
        ),
        interface: bool = typer.Option(
            True, "--interface/--no-interface", help="Enable the web interface (base_path /web)."
        ),
        dry_run: bool = typer.Option(
            False, "--dry-run", help="Stage and print the plan as JSON; do not contact the Hub."
        ),
        stage_dir: Optional[Path] = typer.Option(
            None,
            "--stage-dir",
            help="Stage into this new or empty folder and keep it (the dry-run plan, "
            f"{PLAN_FILE}, goes beside it).",
        ),
    ) -> None:
        """Publish an environment as a Hugging Face Docker Space."""
        cli_vars = parse_pairs(env_vars, "--env-var")
        secret_values = parse_pairs(secrets, "--secret", from_env=True)
        both = sorted(set(cli_vars) & set(secret_values))
        if both:
            fail(f"{', '.join(both)} given both as --env-var and as --secret", code=2)
        _check_flags(create_pr, private, hardware, bool(cli_vars or secret_values))
        if repo_id is not None:
            check_repo_id(repo_id)

        project = _load(path)
        manifest = project.manifest
        patterns: list[str] = []
        if exclude is not None:
            from ..staging import StagingError, read_exclude_file

            try:
                patterns = read_exclude_file(exclude)
            except StagingError as exc:
                fail(str(exc), code=2)
        # A secret replaces a manifest variable of the same name: the Hub keeps one of each.
        variables = {k: v for k, v in manifest.variables.items() if k not in secret_values}
        variables.update(cli_vars)
        if create_pr and variables:
            warn("openenv.yaml variables are not set with --create-pr")
        options = {"base_image": base_image, "interface": interface, "exclude": patterns}

        if dry_run:
            _dry_run(
                project,
                stage_dir,
                options,
                repo_id=full_repo_id(repo_id or manifest.name, USER_PLACEHOLDER),
                private=private,
                hardware=hardware,
                create_pr=create_pr,
                variables=variables,
                secret_names=sorted(secret_values),
            )
            return

        from huggingface_hub import HfApi

        with tempfile.TemporaryDirectory(prefix="openenv-push-") as scratch:
            folder = stage_dir if stage_dir is not None else Path(scratch) / "space"
            # The folder is checked (staged, its wheel built) before a token is asked for, so
            # a broken environment says so whether or not you are logged in.
            staged = _stage(project, folder, **options)
            api = HfApi(token=require_token())
            target = full_repo_id(repo_id or manifest.name, hub_user(api))
            pr_url = _upload(
                api,
                target,
                staged.root,
                private=private,
                hardware=hardware,
                create_pr=create_pr,
                variables={} if create_pr else variables,
                secrets=secret_values,
                count=len(staged.files),
                name=manifest.name,
            )
        if pr_url:
            success(f"Opened a pull request on {target}")
            typer.echo(pr_url)
        else:
            success(f"Pushed {manifest.name} to {target}; the Space builds now")
        typer.echo(space_url(target))


def _dry_run(
    project: EnvProject,
    stage_dir: Optional[Path],
    options: dict[str, Any],
    *,
    repo_id: str,
    private: bool,
    hardware: Optional[str],
    create_pr: bool,
    variables: dict[str, str],
    secret_names: list[str],
) -> None:
    """Stage, then write the plan beside the staged folder and print it; no Hub, no token."""
    from ..staging import SPACE_BASE_IMAGE

    if stage_dir is not None:
        staged = _stage(project, stage_dir.resolve(), **options)
    else:
        scratch = Path(tempfile.mkdtemp(prefix="openenv-push-"))
        try:
            staged = _stage(project, scratch / "space", **options)
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
    plan = {
        "environment": project.manifest.name,
        "repo_id": repo_id,
        "space_url": space_url(repo_id),
        "private": private,
        "hardware": hardware,
        "create_pr": create_pr,
        "base_image": options["base_image"] or SPACE_BASE_IMAGE,
        "interface": options["interface"],
        "variables": variables,
        "secrets": secret_names,
        "stage_dir": str(staged.root),
        "files": staged.files,
    }
    text = json.dumps(plan, indent=2, ensure_ascii=False)
    plan_path = staged.root.parent / PLAN_FILE
    plan_path.write_text(text + "\n", encoding="utf-8")
    success(f"Staged {len(staged.files)} files in {staged.root}")
    console.print(escape(f"Plan written to {plan_path}; nothing was sent to the Hub."))
    typer.echo(text)
