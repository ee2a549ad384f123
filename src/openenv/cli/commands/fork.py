"""`openenv fork`: duplicate an environment's Hugging Face Space into your namespace.

The copy is made by the Hub itself (no download, no rebuild from here); variables, secrets and
hardware of the new Space are set in the same request.
"""

from __future__ import annotations

import json
from typing import Any, Optional

import typer
from rich.text import Text

from .._output import console, fail, success
from .push import (
    USER_PLACEHOLDER,
    check_repo_id,
    full_repo_id,
    hub_errors,
    hub_user,
    parse_pairs,
    require_token,
    space_url,
)

#: The free CPU tier: a fork never lands on paid hardware unless asked to.
DEFAULT_HARDWARE = "cpu-basic"


def _duplicate(
    api: Any,
    source: str,
    target: str,
    *,
    private: Optional[bool],
    hardware: str,
    variables: list[dict[str, str]],
    secrets: list[dict[str, str]],
) -> Any:
    """`duplicate_space` (huggingface_hub < 1.x) or `duplicate_repo` (later versions)."""
    if hasattr(api, "duplicate_space"):
        return api.duplicate_space(
            source,
            target,
            private=private,
            hardware=hardware,
            variables=variables or None,
            secrets=secrets or None,
        )
    return api.duplicate_repo(
        source,
        target,
        repo_type="space",
        private=private,
        space_hardware=hardware,
        space_variables=variables or None,
        space_secrets=secrets or None,
    )


def register(app: typer.Typer) -> None:
    """Add the command to the app."""

    @app.command()
    def fork(
        source: str = typer.Argument(..., metavar="OWNER/SPACE", help="The Space to duplicate."),
        repo_id: Optional[str] = typer.Option(
            None,
            "--repo-id",
            "-r",
            help="New Space id, OWNER/NAME or NAME (default: <your user>/<source name>).",
        ),
        private: bool = typer.Option(
            False, "--private", help="Make the new Space private (default: as the source)."
        ),
        set_env: Optional[list[str]] = typer.Option(
            None, "--set-env", "-e", metavar="KEY=VALUE", help="Variable of the new Space."
        ),
        set_secret: Optional[list[str]] = typer.Option(
            None,
            "--set-secret",
            "--secret",
            "-s",
            metavar="KEY[=VALUE]",
            help="Secret of the new Space; KEY alone reads the value from your environment. "
            "Values are never printed.",
        ),
        hardware: str = typer.Option(
            DEFAULT_HARDWARE, "--hardware", "-H", help="Hardware of the new Space."
        ),
        dry_run: bool = typer.Option(
            False, "--dry-run", help="Print the plan as JSON; do not contact the Hub."
        ),
    ) -> None:
        """Duplicate a Hugging Face Space (an environment) into your namespace."""
        owner, _, name = source.partition("/")
        if not owner or not name or "/" in name:
            fail(
                f"the Space to fork must be OWNER/NAME, got {source!r}",
                "For example: openenv fork openenv/echo_env",
                code=2,
            )
        check_repo_id(source, "OWNER/SPACE")
        if repo_id is not None:
            check_repo_id(repo_id)
        variables = parse_pairs(set_env, "--set-env")
        secrets = parse_pairs(set_secret, "--set-secret", from_env=True)
        both = sorted(set(variables) & set(secrets))
        if both:
            fail(f"{', '.join(both)} given both as --set-env and as --set-secret", code=2)

        if dry_run:
            target = full_repo_id(repo_id or name, USER_PLACEHOLDER)
            plan = {
                "from": source,
                "to": target,
                "space_url": space_url(target),
                "private": True if private else None,
                "hardware": hardware,
                "variables": variables,
                "secrets": sorted(secrets),
            }
            typer.echo(json.dumps(plan, indent=2, ensure_ascii=False))
            return

        from huggingface_hub import HfApi

        api = HfApi(token=require_token())
        target = full_repo_id(repo_id or name, hub_user(api))
        if target == source:
            fail(
                f"{source} is already yours: a fork needs another name",
                "Pass --repo-id NEW-NAME.",
                code=2,
            )
        with (
            console.status(Text(f"Duplicating {source} to {target}")),
            hub_errors(f"Duplicating {source}", f"{source} to {target}"),
        ):
            _duplicate(
                api,
                source,
                target,
                private=True if private else None,
                hardware=hardware,
                variables=[{"key": k, "value": v} for k, v in variables.items()],
                secrets=[{"key": k, "value": v} for k, v in secrets.items()],
            )
        success(f"Forked {source} to {target}; the new Space builds now")
        typer.echo(space_url(target))
