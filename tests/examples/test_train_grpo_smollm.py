"""examples/train_grpo_smollm.py: TRL's GRPOTrainer takes a few real steps with the pretrained
SmolLM2-135M-Instruct against a served reasoning gym environment, and trains on the
environment's rewards.

How much the model improves is the full run's business (docs/training.md); here two steps of
eight completions check the plumbing: the rewards the trainer used are the ones the served
environment returned, and the weights moved.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.server import REPO, serve

pytestmark = pytest.mark.slow

SCRIPT = REPO / "examples" / "train_grpo_smollm.py"


def _require() -> None:
    # Checked in the test, not at import: importing torch costs seconds at every collection.
    for module in ("torch", "transformers", "trl", "datasets", "rich"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is missing: it is in the `training` extra")
    if importlib.util.find_spec("reasoning_gym_env") is None:
        pytest.skip("reasoning_gym_env is missing: pip install -e envs/reasoning_gym_env")
    from openenv.models.checkpoint import ModelNotInstalledError, ensure_checkpoint

    try:
        ensure_checkpoint()
    except ModelNotInstalledError as exc:
        pytest.skip(f"SmolLM2-135M-Instruct is not installed: {exc}")


@pytest.fixture(scope="module")
def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("train_grpo_smollm", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    if importlib.util.find_spec("reasoning_gym_env") is None:
        pytest.skip("reasoning_gym_env is missing: pip install -e envs/reasoning_gym_env")
    with serve("reasoning_gym_env.server.app:app") as server:
        yield server.url


def test_answers_are_read_from_tags_or_the_last_number(example: ModuleType) -> None:
    assert example.answer_of("3 + 4 = 7.") == "7"
    assert example.answer_of("The sum is <answer> 12 </answer>, not 13") == "12"
    assert example.answer_of("no idea") == "no idea"
    assert example.has_format("<answer>7</answer>")
    assert not example.has_format("<answer>seven</answer> 7")
    assert example.format_reward(["<answer>7</answer>", "7"]) == [1.0, 0.0]


@pytest.mark.timeout(300)
def test_grpo_trains_smollm_on_the_served_environments_rewards(
    example: ModuleType, server_url: str, tmp_path: Path
) -> None:
    _require()
    import torch

    from openenv.models.checkpoint import load_model
    from reasoning_gym_env import ReasoningGymAction, ReasoningGymEnv

    torch.manual_seed(0)
    model, tokenizer = load_model()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    settings = example.Settings(
        steps=2,
        num_generations=8,
        prompts_per_step=1,
        max_completion_length=12,
        train_questions=32,
        learning_rate=1e-5,
    )
    trainer, trace = example.grpo_train(
        model, tokenizer, server_url, settings, tmp_path, log=lambda _line: None
    )

    assert trainer.state.global_step == 2
    assert len(trace.batches) == 2
    # The reward function was handed exactly the rewards the rollouts got from the server...
    assert trace.scored == [batch["env_reward"] for batch in trace.batches]
    for batch in trace.batches:
        assert len(batch["env_reward"]) == 8 and len(set(batch["seeds"])) == 1
        assert set(batch["env_reward"]) <= {0.0, 1.0}  # the dataset verifier: right sum or not
    # ...and the served environment gives those rewards to those answers when asked again.
    with ReasoningGymEnv(base_url=server_url).sync() as client:
        for batch in trace.batches:
            for seed, answer, reward in zip(
                batch["seeds"], batch["answers"], batch["env_reward"], strict=True
            ):
                client.reset(seed=seed, **example.RESET_OPTIONS)
                replay = client.step(ReasoningGymAction(answer=answer))
                assert replay.reward == reward, (seed, answer)
    # TRL logged the environment's rewards as the env_reward part of each step's reward.
    logged = [e for e in trainer.state.log_history if "rewards/env_reward/mean" in e]
    assert [e["rewards/env_reward/mean"] for e in logged] == pytest.approx(
        [sum(b["env_reward"]) / len(b["env_reward"]) for b in trace.batches]
    )
    # A group with different rewards gives a policy gradient: the weights moved.
    assert any(len(set(b["env_reward"])) > 1 for b in trace.batches), trace.batches
    changed = [
        name
        for name, p in trainer.model.named_parameters()
        if not torch.equal(p.detach().cpu(), before[name])
    ]
    assert changed
