"""An LLM pipeline end to end on CPU: teacher rollouts, fine-tuning, then GRPO against the
served environment.

The task is reasoning-gym's `basic_arithmetic` restricted to one operation on two small numbers
("Calculate 7 - 3."), answered inside `<answer>...</answer>` tags (the environment's
`answer_tag`): the model must learn the answer format and the arithmetic. Everything runs
against the reasoning gym environment served over the protocol (the local provider starts it in
a child process); nothing is downloaded from a model or data hub.

1. Teacher rollouts: a scripted teacher that computes the answer from the question (it knows
   the arithmetic; it is not a model) plays episodes on training seeds through the client; the
   rewarded episodes become the fine-tuning data (`teacher_rollouts.jsonl`).
2. A tiny Llama-style model built from a config, with a byte-level BPE tokenizer trained on the
   spot on the collected text, is fine-tuned on the teacher's answers (loss on the answer only).
3. TRL's `GRPOTrainer` trains it further with `openenv.integrations.trl.rollout_func`: each
   prompt is an episode on the served environment (several WebSocket sessions at once), the
   trainer's model samples the answer and the environment scores it (the reward is the
   environment's, never computed here; a failed episode refuses the batch, never scores 0).
4. The random-init, fine-tuned and GRPO-trained models answer the questions of held-out seeds,
   greedily and sampled, scored by the environment; the figures go to `results.json` and a PNG.

    python examples/train_llm.py --plot docs/images/train_llm.png
    python examples/train_llm.py --quick   # a smoke run of every stage

Needs the `training` extra (torch, transformers, trl, matplotlib) and the reasoning gym
environment (`pip install -e envs/reasoning_gym_env`).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATASET = "basic_arithmetic"
#: two numbers from 0 to 10, added or subtracted: small enough for a tiny model to learn
DATASET_CONFIG: dict[str, Any] = {
    "min_terms": 2,
    "max_terms": 2,
    "min_digits": 1,
    "max_digits": 1,
    "operators": ["+", "-"],
    "allow_parentheses": False,
    "allow_negation": False,
}
ANSWER_TAG = "answer"
#: every episode's reset: one question per dataset seed, answered inside the tags
RESET_OPTIONS: dict[str, Any] = {
    "dataset_name": DATASET,
    "dataset_config": DATASET_CONFIG,
    "size": 1,
    "answer_tag": ANSWER_TAG,
}
#: seeds of held-out evaluation questions start here (training seeds are below it)
EVAL_SEED_BASE = 1_000_000
#: sampled answers per held-out question (the greedy answer is one)
SAMPLES_PER_QUESTION = 4
_EXPRESSION = re.compile(r"(-?\d+)\s*([+-])\s*(-?\d+)")


@dataclass
class Settings:
    teacher_episodes: int = 600
    eval_episodes: int = 200
    sft_steps: int = 400
    sft_batch_size: int = 32
    sft_lr: float = 3e-3
    grpo_steps: int = 300
    grpo_prompts_per_step: int = 8
    num_generations: int = 8
    #: episodes of a GRPO batch played at once, each on its own WebSocket session
    grpo_sessions: int = 4
    grpo_lr: float = 2e-4
    temperature: float = 1.0
    hidden_size: int = 64
    layers: int = 2
    seed: int = 0
    #: torch threads: one is as fast for a model this small, and fair to a shared machine
    threads: int = 1


def prompt_of(question: str) -> str:
    return f"{question}\n"


def teacher_answer(question: str) -> str:
    """The scripted teacher: it computes the answer (it knows the arithmetic, it is no model)."""
    match = _EXPRESSION.search(question)
    if match is None:
        raise ValueError(f"the teacher cannot read {question!r}")
    left, operator, right = int(match[1]), match[2], int(match[3])
    value = left + right if operator == "+" else left - right
    return f"<{ANSWER_TAG}>{value}</{ANSWER_TAG}>"


class ServedTask:
    """The served environment, one question per seed: `reset(seed)` always asks the same
    question, `step` scores an answer with the dataset's verifier."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def question(self, seed: int) -> str:
        result = self._client.reset(seed=seed, **RESET_OPTIONS)
        return str(result.observation.question)

    def play(self, seed: int, answer_for: Callable[[str], str]) -> tuple[str, str, float]:
        """One episode: the question, the answer given, and the environment's reward."""
        from reasoning_gym_env import ReasoningGymAction

        question = self.question(seed)
        answer = answer_for(question)
        result = self._client.step(ReasoningGymAction(answer=answer))
        if result.reward is None:
            raise RuntimeError(f"the environment gave no reward for seed {seed}")
        return question, answer, float(result.reward)

    def score(self, seed: int, question: str, answer: str) -> float:
        """The reward of `answer` to the question of `seed` (checked to be `question`)."""
        asked, _, reward = self.play(seed, lambda _question: answer)
        if asked != question:
            raise RuntimeError(f"seed {seed} asked {asked!r}, not {question!r}")
        return reward


def collect_teacher_rollouts(
    task: ServedTask, seeds: Sequence[int], path: Path
) -> list[dict[str, Any]]:
    rows = []
    for seed in seeds:
        question, answer, reward = task.play(seed, teacher_answer)
        rows.append({"seed": seed, "question": question, "answer": answer, "reward": reward})
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return rows


# --- the tiny model -----------------------------------------------------------------------


def train_tokenizer(texts: Sequence[str]) -> Any:
    """A byte-level BPE trained on the collected text; digits stay single tokens so numbers
    are spelled digit by digit, and the answer tags are whole tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    special = ["<pad>", "<eos>"]
    trainer = trainers.BpeTrainer(
        vocab_size=256 + 64,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", eos_token="<eos>")
    fast.add_tokens([f"<{ANSWER_TAG}>", f"</{ANSWER_TAG}>"])
    fast.padding_side = "left"  # decoder-only generation pads on the left
    return fast


def build_model(tokenizer: Any, settings: Settings) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=settings.hidden_size,
        intermediate_size=settings.hidden_size * 4,
        num_hidden_layers=settings.layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=64,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    return LlamaForCausalLM(config)


def fine_tune(
    model: Any, tokenizer: Any, rows: Sequence[dict[str, Any]], settings: Settings
) -> list[float]:
    """Supervised fine-tuning on the teacher's answers (the loss covers the answer and the end
    of sequence, not the question)."""
    import torch

    examples = []
    for row in rows:
        prompt = tokenizer(prompt_of(row["question"]))["input_ids"]
        answer = tokenizer(row["answer"])["input_ids"] + [tokenizer.eos_token_id]
        examples.append((prompt + answer, [-100] * len(prompt) + answer))
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.sft_lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: 0.5 * (1 + math.cos(math.pi * step / max(1, settings.sft_steps)))
    )
    rng = random.Random(settings.seed)
    losses = []
    model.train()
    for _ in range(settings.sft_steps):
        batch = rng.sample(examples, min(settings.sft_batch_size, len(examples)))
        width = max(len(ids) for ids, _ in batch)
        pad = tokenizer.pad_token_id
        input_ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids, _ in batch])
        labels = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in batch])
        mask = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids, _ in batch])
        loss = model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        if len(losses) % max(1, settings.sft_steps // 5) == 0:
            recent = losses[-20:]
            print(
                f"  fine-tuning step {len(losses)}: loss {sum(recent) / len(recent):.3f}",
                flush=True,
            )
    model.eval()
    return losses


def answers_of(
    model: Any, tokenizer: Any, prompts: Sequence[str], temperature: float | None
) -> list[str]:
    """The model's answers: greedy (`temperature` None), else sampled as GRPO samples."""
    import torch

    encoded = tokenizer(list(prompts), return_tensors="pt", padding=True)
    sampling = {"do_sample": False}
    if temperature is not None:
        sampling = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
    with torch.no_grad():
        output = model.generate(
            **encoded,
            max_new_tokens=8,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            **sampling,
        )
    new_tokens = output[:, encoded["input_ids"].shape[1] :]
    return list(tokenizer.batch_decode(new_tokens, skip_special_tokens=True))


def evaluate(
    model: Any, tokenizer: Any, task: ServedTask, seeds: Sequence[int], temperature: float
) -> dict[str, float]:
    """The held-out questions answered greedily, and sampled (`SAMPLES_PER_QUESTION` answers
    each, the policy GRPO trains), all scored by the served environment."""
    questions = [task.question(seed) for seed in seeds]
    results: dict[str, float] = {}
    for mode, repeat in (("greedy", 1), ("sampled", SAMPLES_PER_QUESTION)):
        episodes = [(s, q) for s, q in zip(seeds, questions, strict=True) for _ in range(repeat)]
        rewards: list[float] = []
        for start in range(0, len(episodes), 64):
            chunk = episodes[start : start + 64]
            prompts = [prompt_of(question) for _, question in chunk]
            answers = answers_of(
                model, tokenizer, prompts, None if mode == "greedy" else temperature
            )
            for (seed, question), answer in zip(chunk, answers, strict=True):
                rewards.append(task.score(seed, question, answer))
        results[f"{mode}_reward"] = sum(rewards) / len(rewards)
        results[f"{mode}_solved"] = sum(r == 1.0 for r in rewards) / len(rewards)
    return results


# --- GRPO against the served environment --------------------------------------------------


def grpo_train(
    model: Any,
    tokenizer: Any,
    base_url: str,
    train_rows: Sequence[dict[str, Any]],
    settings: Settings,
    out_dir: Path,
) -> list[dict[str, Any]]:
    import os

    from datasets import Dataset

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl import GRPOConfig, GRPOTrainer

    from openenv.core.harness.sessions import latest_observation
    from openenv.integrations.trl import env_reward, rollout_func

    # TRL hands the rollout its prompts; each becomes an episode on the seed that asks it.
    seed_of_prompt = {prompt_of(row["question"]): row["seed"] for row in train_rows}

    def task_of(prompt: str) -> dict[str, Any]:
        return {"seed": seed_of_prompt[prompt], "reset_kwargs": RESET_OPTIONS}

    def model_prompt(messages: list[dict[str, Any]], tokenizer: Any) -> str:
        # The model reads the question the served environment asked, in its training format.
        observation = latest_observation(messages)
        if observation is None or not observation.get("question"):
            raise RuntimeError(f"no question in the reset observation: {messages}")
        return prompt_of(str(observation["question"]))

    dataset = Dataset.from_dict({"prompt": sorted(seed_of_prompt)})
    batch = settings.grpo_prompts_per_step * settings.num_generations
    config = GRPOConfig(
        output_dir=str(out_dir / "grpo"),
        max_steps=settings.grpo_steps,
        per_device_train_batch_size=batch,
        num_generations=settings.num_generations,
        max_completion_length=8,
        learning_rate=settings.grpo_lr,
        lr_scheduler_type="constant",
        temperature=settings.temperature,
        beta=0.0,
        logging_steps=max(1, settings.grpo_steps // 20),
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=False,
        seed=settings.seed,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[env_reward],
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        rollout_func=rollout_func(
            base_url,
            argument="answer",
            task_builder=task_of,
            prompt_builder=model_prompt,
            max_concurrency=settings.grpo_sessions,
        ),
    )
    trainer.train()
    model.eval()
    return [entry for entry in trainer.state.log_history if "reward" in entry]


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (bars, curve) = plt.subplots(1, 2, figsize=(10, 4))
    names = ["random init", "fine-tuned", "GRPO"]
    keys = ["random_init", "fine_tuned", "grpo"]
    temperature = results["settings"]["temperature"]
    greedy = [results["eval"][key]["greedy_reward"] for key in keys]
    sampled = [results["eval"][key]["sampled_reward"] for key in keys]
    xs = range(len(names))
    bars.bar([x - 0.2 for x in xs], greedy, width=0.4, label="greedy")
    bars.bar([x + 0.2 for x in xs], sampled, width=0.4, label=f"sampled (T={temperature:g})")
    for x, (g, smp) in enumerate(zip(greedy, sampled, strict=True)):
        bars.text(x - 0.2, g + 0.01, f"{g:.2f}", ha="center", fontsize=8)
        bars.text(x + 0.2, smp + 0.01, f"{smp:.2f}", ha="center", fontsize=8)
    bars.set_xticks(list(xs), names)
    bars.set_ylim(0, 1.05)
    bars.set_ylabel("mean reward")
    bars.set_title(f"held-out seeds ({results['settings']['eval_episodes']} questions)")
    bars.legend(loc="upper left")
    log = results["grpo_log"]
    curve.plot([e["step"] for e in log], [e["reward"] for e in log], marker="o")
    curve.axhline(
        results["eval"]["fine_tuned"]["sampled_reward"],
        color="gray",
        ls="--",
        label="fine-tuned, sampled (held out)",
    )
    curve.set_xlabel("GRPO step")
    curve.set_ylabel("mean sampled reward")
    curve.set_title("GRPO against the served environment")
    curve.set_ylim(0, 1.05)
    curve.legend(loc="lower right")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)


def run(settings: Settings, out_dir: Path, plot_path: Path) -> dict[str, Any]:
    import torch

    from reasoning_gym_env import ReasoningGymEnv

    torch.set_num_threads(settings.threads)
    torch.manual_seed(settings.seed)
    random.seed(settings.seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    started = time.perf_counter()

    def lap(name: str) -> None:
        timings[name] = round(time.perf_counter() - started - sum(timings.values()), 1)
        print(f"[{name}] done in {timings[name]:.1f}s", flush=True)

    with ReasoningGymEnv.from_env("reasoning_gym_env").sync() as client:
        print(f"reasoning gym environment serving at {client.base_url}", flush=True)
        task = ServedTask(client)
        lap("start environment")

        rows = collect_teacher_rollouts(
            task, range(settings.teacher_episodes), out_dir / "teacher_rollouts.jsonl"
        )
        kept = [row for row in rows if row["reward"] == 1.0]
        teacher_reward = sum(row["reward"] for row in rows) / len(rows)
        print(f"teacher: {len(rows)} episodes, mean reward {teacher_reward:.3f}", flush=True)
        lap("teacher rollouts")

        tokenizer = train_tokenizer([prompt_of(r["question"]) + r["answer"] for r in kept])
        model = build_model(tokenizer, settings)
        size = sum(p.numel() for p in model.parameters())
        print(f"model: {size:,} parameters, vocabulary {len(tokenizer)}", flush=True)
        eval_seeds = [EVAL_SEED_BASE + i for i in range(settings.eval_episodes)]
        # The question space is small (two numbers from 0 to 10): held-out seeds mostly ask
        # questions the training seeds asked too, and the results say how many.
        trained_on = {row["question"] for row in kept}
        seen = sum(task.question(seed) in trained_on for seed in eval_seeds) / len(eval_seeds)
        print(f"held-out seeds whose question is among the training ones: {seen:.0%}", flush=True)
        scores = {"random_init": evaluate(model, tokenizer, task, eval_seeds, settings.temperature)}
        print(f"random init: {scores['random_init']}", flush=True)
        lap("random-init eval")

        losses = fine_tune(model, tokenizer, kept, settings)
        scores["fine_tuned"] = evaluate(model, tokenizer, task, eval_seeds, settings.temperature)
        print(f"fine-tuned (final loss {losses[-1]:.3f}): {scores['fine_tuned']}", flush=True)
        lap("fine-tuning")

        grpo_log = grpo_train(model, tokenizer, client.base_url, kept, settings, out_dir)
        scores["grpo"] = evaluate(model, tokenizer, task, eval_seeds, settings.temperature)
        print(f"GRPO-trained: {scores['grpo']}", flush=True)
        lap("GRPO")

    results = {
        "task": {"dataset": DATASET, "config": DATASET_CONFIG, "answer_tag": ANSWER_TAG},
        "settings": vars(settings),
        "teacher": {"episodes": len(rows), "mean_reward": teacher_reward},
        "parameters": size,
        "eval": scores,
        "eval_questions_seen_in_training": seen,
        "sft_loss": losses[:: max(1, len(losses) // 50)],
        "grpo_log": [
            {"step": e["step"], "reward": e["reward"], "reward_std": e.get("reward_std")}
            for e in grpo_log
        ],
        "timings_s": timings,
        "total_s": round(time.perf_counter() - started, 1),
    }
    (out_dir / "results.json").write_text(json.dumps(results, indent=2))
    plot(results, plot_path)
    for mode in ("greedy", "sampled"):
        print(
            "held-out mean reward, {}: random init {:.3f}, fine-tuned {:.3f}, GRPO {:.3f}".format(
                mode,
                *(scores[key][f"{mode}_reward"] for key in ("random_init", "fine_tuned", "grpo")),
            )
        )
    print(f"{settings.eval_episodes} held-out questions; total time {results['total_s']:.0f}s")
    print(f"wrote {out_dir / 'results.json'} and {plot_path}")
    return results


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    defaults = Settings()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", type=Path, default=Path("runs/train_llm"))
    parser.add_argument("--plot", type=Path, default=None, help="PNG path (default: in --out-dir)")
    parser.add_argument("--quick", action="store_true", help="a few steps of each stage")
    for name, value in vars(defaults).items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    args = parser.parse_args(argv)
    settings = Settings(**{name: getattr(args, name) for name in vars(defaults)})
    if args.quick:
        settings.teacher_episodes, settings.eval_episodes = 40, 16
        settings.sft_steps, settings.grpo_steps = 5, 2
        settings.grpo_prompts_per_step, settings.num_generations = 2, 4
    return run(settings, args.out_dir, args.plot or args.out_dir / "train_llm.png")


if __name__ == "__main__":
    main()
