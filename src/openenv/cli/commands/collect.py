"""`openenv collect ENV`: run episodes of an environment with a policy and write them as a
dataset (`results.jsonl`, a `datasets` dataset, optionally pushed to the Hub).

ENV is an installed environment ('connect4'), an environment folder, or OpenEnv's
`openspiel:<game>` / `reasoning_gym:<dataset>` (the game or dataset goes to every reset). Any
environment works: MCP environments expose their tools, others one `act` tool taking their
action (see `openenv.core.harness.sessions`). Without `--base-url` the environment is started
with the default provider and stopped at the end.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .._output import console, fail

#: ENV prefixes of OpenEnv's collect, and the reset argument their suffix becomes.
FAMILIES = {"openspiel": "game_name", "reasoning_gym": "dataset_name"}
API_KEY_VARIABLES = {
    "openai": ("OPENAI_API_KEY", "API_KEY"),
    "anthropic": ("ANTHROPIC_API_KEY", "API_KEY"),
}
DEFAULT_SYSTEM_PROMPT = (
    "You act in an environment through tool calls. Read each observation and call one tool "
    "per turn with valid arguments."
)


def parse_env(spec: str) -> tuple[str, dict[str, Any]]:
    """(environment name or folder, reset kwargs) for an ENV argument."""
    family, sep, variant = spec.partition(":")
    if sep and family in FAMILIES and not Path(spec).exists():
        if not variant:
            fail(f"{spec!r} names no {FAMILIES[family]}", hint=f"e.g. {family}:<name>")
        return family, {FAMILIES[family]: variant}
    return spec, {}


@contextlib.contextmanager
def environment_url(name: str, base_url: Optional[str]) -> Iterator[str]:
    """The server to collect from: `base_url`, or the environment started for the run."""
    if base_url:
        yield base_url
        return
    from openenv.auto import AutoEnv

    console.print(f"[cyan]starting[/] {escape(name)} (default provider)")
    client = AutoEnv.from_env(name)
    try:
        yield str(client.base_url)
    finally:
        from openenv.core.utils import run_coroutine_sync

        closed = client.close()
        if closed is not None:
            run_coroutine_sync(closed)


def _api_key(provider: str) -> str:
    for variable in API_KEY_VARIABLES[provider]:
        value = os.environ.get(variable)
        if value:
            return value
    fail(
        f"no API key for --provider {provider}",
        hint=f"set {' or '.join(API_KEY_VARIABLES[provider])}, or use --llm-endpoint for a "
        "self-hosted OpenAI-compatible server, or --provider scripted",
    )


def build_policy(
    provider: str,
    model: Optional[str],
    llm_endpoint: Optional[str],
    llm_port: Optional[int],
    temperature: float,
    max_tokens: int,
    system_prompt: str,
) -> Any:
    from openenv.core.harness.collect import build_model_step
    from openenv.core.harness.sessions import scripted_model_step
    from openenv.core.llm_client import AnthropicClient, LLMClient, OpenAIClient

    if provider == "scripted" and llm_endpoint is None:
        return scripted_model_step
    if provider not in API_KEY_VARIABLES and provider != "scripted":
        fail(f"unknown --provider {provider!r}", hint="use scripted, openai or anthropic")
    if not model:
        fail(
            "--model is required with a model provider or --llm-endpoint",
            hint="e.g. --model gpt-4o-mini",
        )
    if llm_endpoint is not None:  # a self-hosted server may need no key
        variables = API_KEY_VARIABLES.get(provider, API_KEY_VARIABLES["openai"])
        key = next((os.environ[v] for v in variables if os.environ.get(v)), "not-needed")
    else:
        key = _api_key(provider)
    cls: type[LLMClient] = AnthropicClient if provider == "anthropic" else OpenAIClient
    client = cls(  # type: ignore[call-arg]
        llm_endpoint,
        llm_port,
        model=model,
        api_key=key,
        temperature=temperature,
        max_tokens=max_tokens,
    )
    return build_model_step(client, system_prompt=system_prompt)


def register(app: typer.Typer) -> None:
    @app.command("collect")
    def collect(
        env: str = typer.Argument(
            ...,
            help="Installed name, folder, openspiel:<game> or reasoning_gym:<dataset>.",
        ),
        output_dir: Path = typer.Option(..., "--output-dir", "-o", help="Where results go."),
        base_url: Optional[str] = typer.Option(
            None, "--base-url", help="A running server; omitted: start ENV and stop it after."
        ),
        num_episodes: int = typer.Option(10, "--num-episodes", "-n", min=1),
        max_turns: int = typer.Option(9, "--max-turns", min=1, help="Model turns per episode."),
        episode_id_prefix: str = typer.Option("ep", "--episode-id-prefix"),
        resume: bool = typer.Option(
            True, "--resume/--no-resume", help="Skip episodes already in results.jsonl."
        ),
        provider: str = typer.Option(
            "scripted", "--provider", help="scripted, openai or anthropic."
        ),
        model: Optional[str] = typer.Option(None, "--model"),
        llm_endpoint: Optional[str] = typer.Option(
            None, "--llm-endpoint", help="A self-hosted OpenAI-compatible server (vLLM, ...)."
        ),
        llm_port: Optional[int] = typer.Option(None, "--llm-port"),
        temperature: float = typer.Option(0.2, "--temperature"),
        max_tokens: int = typer.Option(200, "--max-tokens"),
        keep_losses: bool = typer.Option(
            False, "--keep-losses", help="Keep episodes with reward < 0 (dropped by default)."
        ),
        min_reward: Optional[float] = typer.Option(
            None, "--min-reward", help="Keep only episodes with reward >= this."
        ),
        push_to_hub: Optional[str] = typer.Option(
            None, "--push-to-hub", "-H", help="Upload to this Hub dataset repo (user/name)."
        ),
        dry_run: bool = typer.Option(
            False, "--dry-run", help="With --push-to-hub: prepare and list, upload nothing."
        ),
        private: bool = typer.Option(False, "--private"),
        commit_message: Optional[str] = typer.Option(None, "--commit-message"),
        dataset_config: str = typer.Option(
            "default", "--dataset-config", help="Config name in the Hub dataset card."
        ),
        system_prompt: str = typer.Option(DEFAULT_SYSTEM_PROMPT, "--system-prompt"),
        concurrency: int = typer.Option(1, "--concurrency", min=1, help="Episodes at once."),
        seed: Optional[int] = typer.Option(None, "--seed", help="Episode i resets with seed+i."),
        no_dataset: bool = typer.Option(
            False, "--no-dataset", help="Only results.jsonl: skip the datasets export."
        ),
    ) -> None:
        """Collect episodes of ENV with a policy into a dataset.

        The scripted policy (no model) calls the first tool with the first legal action, else
        with sample arguments from the tool's schema: a smoke test of the pipeline.
        """
        from openenv.core.harness import HarnessRunLimits, MCPHarnessAdapter
        from openenv.core.harness.collect import (
            CollectRunner,
            EpisodeRecord,
            RolloutSerializer,
            push_to_hf_hub,
            write_dataset,
        )
        from openenv.core.harness.sessions import EnvSessionFactory

        name, reset_kwargs = parse_env(env)
        if dry_run and not push_to_hub:
            fail("--dry-run goes with --push-to-hub", hint="add --push-to-hub user/name")
        policy = build_policy(
            provider, model, llm_endpoint, llm_port, temperature, max_tokens, system_prompt
        )
        threshold = min_reward if min_reward is not None else (None if keep_losses else 0.0)

        def should_keep(record: EpisodeRecord) -> bool:
            if threshold is None or record.reward is None:
                return True
            return record.reward >= threshold

        serializer = RolloutSerializer(output_dir)
        with environment_url(name, base_url) as url:
            serializer.write_metadata(
                {
                    "env": env,
                    "env_base_url": url,
                    "reset_kwargs": reset_kwargs,
                    "provider": "openai-compatible" if llm_endpoint else provider,
                    "model": model,
                    "llm_endpoint": llm_endpoint,
                    "num_episodes_requested": num_episodes,
                    "max_turns": max_turns,
                    "temperature": temperature,
                    "max_tokens": max_tokens,
                    "min_reward": threshold,
                    "concurrency": concurrency,
                }
            )
            factory = EnvSessionFactory(
                url,
                reset_kwargs=reset_kwargs,
                system_prompt=None
                if provider == "scripted" and not llm_endpoint
                else system_prompt,
            )
            try:
                factory.describe()
            except Exception as exc:
                fail(
                    f"cannot read {url}/schema: {exc}",
                    hint="is the environment running there? Check --base-url",
                )
            runner = CollectRunner(
                session_factory=factory,
                harness_adapter=MCPHarnessAdapter(),
                serializer=serializer,
                limits=HarnessRunLimits(
                    max_turns=max_turns,
                    sampling={"temperature": temperature, "max_tokens": max_tokens},
                ),
                concurrency=concurrency,
            )
            progress = Progress(
                TextColumn("[cyan]collecting"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("failed={task.fields[failed]}"),
                TimeElapsedColumn(),
                console=console,
            )
            with progress:
                task_id = progress.add_task("collect", total=num_episodes, failed=0)
                failed = 0

                def advance(record: Optional[EpisodeRecord]) -> None:
                    nonlocal failed
                    if record is not None and record.status == "failed":
                        failed += 1
                        progress.console.print(
                            f"[red]failed[/] {record.episode_id}: {escape(record.error or '')}"
                        )
                    progress.update(task_id, advance=1, failed=failed)

                result = runner.run(
                    model_step=policy,
                    num_episodes=num_episodes,
                    episode_id_prefix=episode_id_prefix,
                    resume=resume,
                    should_keep=should_keep,
                    progress=advance,
                    seed=seed,
                )
        summary = result.reward_summary()
        table = Table(
            "episodes",
            "kept",
            "rewards",
            "mean",
            "min",
            "max",
            "success",
            "dropped",
            "failed",
            "skipped",
            box=None,
        )

        def number(value: Any) -> str:
            return "-" if value is None else f"{value:.3g}"

        table.add_row(
            str(num_episodes),
            str(result.num_collected),
            str(summary["scored"]),
            number(summary["mean"]),
            number(summary["min"]),
            number(summary["max"]),
            "-" if summary["success_rate"] is None else f"{summary['success_rate']:.0%}",
            str(result.num_dropped),
            str(result.num_failed),
            str(result.num_skipped),
        )
        console.print(table)
        dropped = [r for r in result.dropped_rewards if r is not None]
        if dropped:
            console.print(
                f"dropped by the filter: {len(dropped)} episodes, rewards mean "
                f"{number(sum(dropped) / len(dropped))} (min {number(min(dropped))}, "
                f"max {number(max(dropped))}); --keep-losses or --min-reward keep them"
            )
        console.print(f"results: {serializer.results_path}")
        if not no_dataset:
            try:
                target = write_dataset(output_dir)
            except ImportError as exc:
                console.print(f"[yellow]no dataset written:[/] {exc}")
            else:
                console.print(f"dataset: {target} (datasets.load_from_disk)")
        if push_to_hub:
            outcome = push_to_hf_hub(
                output_dir,
                push_to_hub,
                private=private,
                commit_message=commit_message,
                dry_run=dry_run,
                config_name=dataset_config,
            )
            if dry_run:
                console.print(
                    f"dry run: would upload {', '.join(outcome.files)} ({outcome.num_episodes} "  # type: ignore[union-attr]
                    f"episodes) to {outcome.url}"  # type: ignore[union-attr]
                )
            else:
                console.print(f"[green]pushed[/] {outcome}")
        if result.num_failed:
            console.print(
                f"[yellow]{result.num_failed} episode(s) failed[/]: see `error` in "
                f"{serializer.results_path}; run again to retry them (resume)"
            )
            raise typer.Exit(1 if result.num_collected == 0 else 0)
