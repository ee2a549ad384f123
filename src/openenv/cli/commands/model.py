"""`openenv model`: the real pretrained model (SmolLM2-135M-Instruct) on this machine."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from openenv.core.env_server.runner import DEFAULT_HOST

from .._output import console, fail, success

DEFAULT_MODEL_PORT = 8001


def register(app: typer.Typer) -> None:
    group = typer.Typer(
        name="model",
        help="Serve the local pretrained model (SmolLM2-135M-Instruct) OpenAI-compatibly.",
        no_args_is_help=True,
    )

    @group.command()
    def serve(
        host: str = typer.Option(DEFAULT_HOST, help="Interface to bind (loopback by default)."),
        port: int = typer.Option(DEFAULT_MODEL_PORT, "--port", "-p", help="Port to listen on."),
        checkpoint: Optional[Path] = typer.Option(
            None,
            help="A transformers checkpoint folder to serve instead (e.g. a trained one).",
        ),
        threads: int = typer.Option(
            1, min=1, help="torch threads; one decodes a small model fastest on a busy CPU."
        ),
        max_tokens: int = typer.Option(
            512, min=1, help="Answer length for requests that name none."
        ),
        max_tokens_limit: Optional[int] = typer.Option(
            None, min=1, help="Cap on every request's answer length (default: the context)."
        ),
        name: Optional[str] = typer.Option(None, help="The model name replies carry."),
    ) -> None:
        """Serve chat completions at http://HOST:PORT/v1 as vLLM does: token ids, logprobs,
        tool calls, seeds, streaming."""
        from openenv.models.checkpoint import ModelNotInstalledError, ensure_checkpoint
        from openenv.models.server import serve_forever

        try:
            if checkpoint is None:
                with console.status("Preparing the model (converted once, then cached)..."):
                    ensure_checkpoint()
            elif not (checkpoint / "config.json").is_file():
                fail(f"{checkpoint} is not a transformers checkpoint (no config.json)", code=2)

            def ready(url: str, model: str) -> None:
                success(f"Serving {model} at {url}/v1 (Ctrl-C stops)")

            serve_forever(
                checkpoint,
                host=host,
                port=port,
                threads=threads,
                default_max_tokens=max_tokens,
                max_tokens_limit=max_tokens_limit,
                model_name=name,
                on_ready=ready,
            )
        except ModelNotInstalledError as exc:
            fail(str(exc), code=2)

    @group.command()
    def path() -> None:
        """Print the converted checkpoint's folder (converting it first if needed)."""
        from openenv.models.checkpoint import ModelNotInstalledError, ensure_checkpoint

        try:
            typer.echo(str(ensure_checkpoint()))
        except ModelNotInstalledError as exc:
            fail(str(exc), code=2)

    app.add_typer(group)
