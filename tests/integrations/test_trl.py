"""Real GRPO steps with TRL against a served math environment: a tiny GPT-2 built from a
config, a tokenizer trained here (nothing downloaded), the trainer's own generation on CPU."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="the training extra is not installed (torch)")
pytest.importorskip("transformers", reason="the training extra is not installed (transformers)")
trl = pytest.importorskip("trl", reason="the training extra is not installed (trl)")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast  # noqa: E402

from openenv.core.harness.sessions import EnvSessionFactory, FleetSessionFactory  # noqa: E402
from openenv.fleet import EnvFleet, ServerLostError, SyncEnvFleet  # noqa: E402
from openenv.integrations.trl import (  # noqa: E402
    RolloutInfrastructureError,
    env_reward,
    rollout_func,
)
from tests.support.server import serve  # noqa: E402

pytestmark = pytest.mark.slow

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def _bpe(
    corpus: list[str],
    vocab_size: int,
    pad: str,
    eos: str,
    extra_special: tuple[str, ...] = (),
    byte_alphabet: bool = False,
) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained here on `corpus` (nothing downloaded). Without the
    byte alphabet only the corpus's characters exist: a random model then samples digits often."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=[pad, *extra_special, eos],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet() if byte_alphabet else [],
        ),
    )
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token=pad, eos_token=eos)
    wrapped.padding_side = "left"
    return wrapped


def _tokenizer() -> PreTrainedTokenizerFast:
    """Trained on the math environment's questions and some answers."""
    corpus = [f"What is {a} + {b}? {a + b}" for a in range(0, 100, 7) for b in range(0, 100, 9)]
    corpus += ["the answer is", "many", "none", "I do not know"]
    return _bpe(corpus, 200, pad="<pad>", eos="<eos>")


def _model(
    tokenizer: PreTrainedTokenizerFast, n_positions: int = 128, n_embd: int = 32, n_layer: int = 1
) -> GPT2LMHeadModel:
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=n_positions,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=2,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return GPT2LMHeadModel(config)


def _question(messages: list[dict[str, Any]], tokenizer: Any) -> str:
    """The model sees only the question (its vocabulary is the questions')."""
    for line in str(messages[-1]["content"]).split("\n\n"):
        if line.startswith("question: "):
            return line.removeprefix("question: ") + " "
    raise AssertionError(f"no question in {messages!r}")


def _config(tmp_path: Path, max_steps: int) -> Any:
    return trl.GRPOConfig(
        output_dir=str(tmp_path / "out"),
        max_steps=max_steps,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=2,
        learning_rate=5e-3,
        temperature=1.0,
        use_cpu=True,
        bf16=False,
        fp16=False,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        seed=0,
        dataloader_num_workers=0,
    )


@pytest.fixture(scope="module")
def math_server() -> Iterator[str]:
    with serve("math_env.server.app:app") as server:
        yield server.url


class Recorder:
    """Keeps every batch the rollout returned and every batch the reward function scored."""

    def __init__(self, func: Any) -> None:
        self.func = func
        self.batches: list[dict[str, list[Any]]] = []
        self.scored: list[list[float | None]] = []

    def rollout(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        out = self.func(prompts, trainer)
        self.batches.append(out)
        return out

    def reward(self, completions: list[Any], **kwargs: Any) -> list[float | None]:
        rewards = env_reward(completions, **kwargs)
        self.scored.append(list(rewards))
        return rewards


def _trainer(
    tmp_path: Path, recorder: Recorder, max_steps: int
) -> tuple[Any, dict[str, torch.Tensor]]:
    tokenizer = _tokenizer()
    model = _model(tokenizer)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    dataset = Dataset.from_dict({"prompt": [str(seed) for seed in range(16)]})
    trainer = trl.GRPOTrainer(
        model=model,
        reward_funcs=recorder.reward,
        args=_config(tmp_path, max_steps),
        train_dataset=dataset,
        processing_class=tokenizer,
        rollout_func=recorder.rollout,
    )
    return trainer, before


def test_grpo_steps_train_on_the_environments_rewards(math_server: str, tmp_path: Path) -> None:
    recorder = Recorder(
        rollout_func(
            math_server,
            argument="answer",
            prompt_builder=_question,
            task_builder=lambda prompt: {"seed": int(prompt)},
        )
    )
    trainer, before = _trainer(tmp_path, recorder, max_steps=3)
    trainer.train()

    assert trainer.state.global_step == 3
    assert len(recorder.batches) >= 3
    for batch in recorder.batches:
        assert len(batch["completion_ids"]) == 4
        # The server stepped each episode once (its own state's count) and scored it.
        assert [m["step_count"] for m in batch["verify_metrics"]] == [1, 1, 1, 1]
        assert not any(batch["infra_failed"])
        assert all(isinstance(r, float) for r in batch["env_reward"])
        # The math rubric's rewards: 0.2 for an integer, 1.0 for the right one, else 0.
        assert set(batch["env_reward"]) <= {0.0, 0.2, 1.0}
        assert all(
            len(c) == len(lp) > 0
            for c, lp in zip(batch["completion_ids"], batch["logprobs"], strict=True)
        )
    # What TRL scored is exactly what the environment returned.
    assert recorder.scored == [batch["env_reward"] for batch in recorder.batches]
    logged = [entry["reward"] for entry in trainer.state.log_history if "reward" in entry]
    expected = [sum(b["env_reward"]) / 4 for b in recorder.batches]
    assert logged == pytest.approx(expected[: len(logged)])
    # Some group had different rewards, so the policy gradient moved the weights.
    assert any(len(set(b["env_reward"])) > 1 for b in recorder.batches)
    changed = [
        name
        for name, p in trainer.model.named_parameters()
        if not torch.equal(p.detach().cpu(), before[name])
    ]
    assert changed


def test_an_environment_killed_mid_batch_refuses_the_batch(tmp_path: Path) -> None:
    with serve("math_env.server.app:app", in_process=False) as server:
        sessions = EnvSessionFactory(server.url)
        opened = []

        class KillsTheServer:
            """Stops the server after the batch's second episode opened its session."""

            def create(self, task: Any, seed: int | None = None, episode_id: str | None = None):
                opened.append(task)
                if len(opened) == 3:
                    assert server.process is not None
                    server.process.kill()
                    server.process.wait()
                return sessions.create(task, seed=seed, episode_id=episode_id)

        recorder = Recorder(
            rollout_func(
                session_factory=KillsTheServer(),
                prompt_builder=_question,
                task_builder=lambda prompt: {"seed": int(prompt)},
                infra_retries=1,
            )
        )
        trainer, before = _trainer(tmp_path, recorder, max_steps=1)
        with pytest.raises(RolloutInfrastructureError) as caught:
            trainer.train()

    # Episodes 3 and 4 (and their retries) could not reach the environment: the batch is
    # refused, never scored, and the model is untouched.
    assert sorted(caught.value.errors) == [2, 3]
    assert caught.value.category == "infrastructure"
    assert len(opened) == 6
    assert recorder.scored == []
    assert all(
        torch.equal(p.detach().cpu(), before[n]) for n, p in trainer.model.named_parameters()
    )


# -- environment_factory -----------------------------------------------------------------------

TOOL_PROMPT = "Answer with the act tool."


def _question_only(messages: list[dict[str, Any]]) -> str:
    return _question(messages, None)


def _tool_calling_tokenizer(tool: Any) -> PreTrainedTokenizerFast:
    """Byte-level BPE over conversations rendered with TRL's bundled Qwen3 template (which TRL
    knows how to parse tool calls from), trained here."""
    from trl.chat_template_utils import add_response_schema, qwen3_chat_template

    def build(corpus: list[str], vocab_size: int) -> PreTrainedTokenizerFast:
        tokenizer = _bpe(
            corpus,
            vocab_size,
            pad="<|endoftext|>",
            eos="<|im_end|>",
            extra_special=("<|im_start|>",),
            byte_alphabet=True,
        )
        tokenizer.chat_template = qwen3_chat_template
        return tokenizer

    renderer = build(["bootstrap"], 300)
    corpus = [
        _tool_prompt(renderer, tool, f"What is {a} + {b}?") + _tool_call(a + b)
        for a in range(0, 100, 11)
        for b in range(0, 100, 13)
    ]
    tokenizer = build(corpus, 600)
    # The call's fixed parts as single tokens: a model this small learns a 5-token call in the
    # few supervised steps a test can afford (the numbers stay ordinary BPE tokens).
    tokenizer.add_tokens([CALL_OPEN, CALL_CLOSE])
    return add_response_schema(tokenizer)


def _tool_prompt(tokenizer: Any, tool: Any, question: str) -> str:
    messages = [{"role": "user", "content": f"{TOOL_PROMPT}{question}"}]
    return str(
        tokenizer.apply_chat_template(
            messages, tools=[tool], tokenize=False, add_generation_prompt=True
        )
    )


CALL_OPEN = '<tool_call>\n{"name": "act", "arguments": {"answer": "'
CALL_CLOSE = '"}}\n</tool_call>'


def _tool_call(answer: int) -> str:
    return f"{CALL_OPEN}{answer}{CALL_CLOSE}<|im_end|>"


def _teach_the_tool_call_format(model: Any, tokenizer: Any, tool: Any) -> None:
    """A few supervised steps on the tool-call format only (the last prompt tokens and the call,
    at their real positions: cheap), so that GRPO's rollouts call the environment's tool."""
    import random

    rng = random.Random(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(120):
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        prompt = tokenizer(_tool_prompt(tokenizer, tool, f"What is {a} + {b}?"))["input_ids"]
        call = tokenizer(_tool_call(rng.randint(0, 198)))["input_ids"]
        window = prompt[-6:] + call
        start = len(prompt) - 6
        labels = [-100] * 6 + call
        loss = model(
            input_ids=torch.tensor([window]),
            position_ids=torch.arange(start, start + len(window)).unsqueeze(0),
            labels=torch.tensor([labels]),
        ).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()


def test_environment_factory_instances_are_served_sessions(math_server: str) -> None:
    from transformers.utils import get_json_schema

    from openenv.integrations.trl import environment_factory

    make = environment_factory(math_server, observation_text=_question_only)
    env = make()
    question = env.reset(seed=3)
    assert question is not None and question.startswith("What is ")
    schema = get_json_schema(env.act)  # type: ignore[attr-defined]
    assert schema["function"]["name"] == "act"
    assert schema["function"]["parameters"]["required"] == ["answer"]
    a, b = question.removeprefix("What is ").removesuffix("? ").removesuffix("?").split(" + ")
    answered = env.act(answer=str(int(a) + int(b)))  # type: ignore[attr-defined]
    assert '"feedback": "correct"' in answered
    assert env.get_reward() == 1.0 and env.steps == 1
    env.act(answer="many")  # type: ignore[attr-defined]
    assert env.get_reward() == 0.0  # the environment's score for a non-integer answer
    env.reset(seed=4)
    assert env.steps == 0 and env.get_reward() == 0.0  # never acted: reward_without_step


@pytest.mark.xfail(
    strict=False,
    reason="since 2026-12-07 the taught tiny model makes no tool call in TRL 1.16's rollouts with "
    "the training extra's newest releases (transformers 5.24/5.25, tokenizers 0.23): it fails "
    "on the last landed commit too; tokenization of the call was checked and is unchanged",
)
def test_grpo_with_environment_factory_calls_the_environments_tools(
    math_server: str, tmp_path: Path
) -> None:
    from openenv.integrations.trl import close_environments, environment_factory

    base = environment_factory(math_server, observation_text=_question_only)
    made: list[Any] = []

    def make() -> Any:
        env = base()
        made.append(env)
        return env

    tokenizer = _tool_calling_tokenizer(base().act)  # type: ignore[attr-defined]
    model = _model(tokenizer, n_positions=512, n_embd=64, n_layer=2)
    _teach_the_tool_call_format(model, tokenizer, base().act)  # type: ignore[attr-defined]
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    dataset = Dataset.from_dict(
        {"prompt": [[{"role": "user", "content": TOOL_PROMPT}]] * 8, "seed": list(range(8))}
    )
    args = _config(tmp_path, max_steps=2)
    args.max_completion_length = 32
    args.max_tool_calling_iterations = 1
    trainer = trl.GRPOTrainer(
        model=model,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        environment_factory=make,
    )
    try:
        trainer.train()
    finally:
        close_environments(trainer)

    assert trainer.state.global_step == 2
    assert made and all(env._session is None for env in made)  # the pooled sessions, closed
    stepped = [env.steps for env in made]
    assert sum(stepped) > 0, stepped
    logs = [entry for entry in trainer.state.log_history if "tools/call_frequency" in entry]
    assert any(entry["tools/call_frequency"] > 0 for entry in logs)
    assert all("rewards/ServedEnvironmentTools/mean" in entry for entry in logs)
    changed = [
        name
        for name, p in trainer.model.named_parameters()
        if not torch.equal(p.detach().cpu(), before[name])
    ]
    assert changed


def test_environment_factory_refuses_to_score_a_killed_environment() -> None:
    from openenv.integrations.trl import environment_factory

    with serve("math_env.server.app:app", in_process=False) as server:
        env = environment_factory(server.url, infra_retries=0)()
        env.reset(seed=1)
        assert server.process is not None
        server.process.kill()
        server.process.wait()
        with pytest.raises(Exception) as failed:
            env.act(answer="3")  # type: ignore[attr-defined]
        assert not isinstance(failed.value, (KeyError, ValueError))
        with pytest.raises(RolloutInfrastructureError) as caught:
            env.get_reward()
        assert caught.value.category == "infrastructure"
        with pytest.raises(RolloutInfrastructureError):
            env.reset(seed=2)


# -- over a fleet ------------------------------------------------------------------------------


@pytest.fixture()
def math_fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SyncEnvFleet]:
    """Two local math servers (the test's own provider records), closed after the test."""
    monkeypatch.setenv("OPENENV_STATE_DIR", str(tmp_path / "state"))
    with EnvFleet("math", servers=2, sessions_per_server=2, acquire_timeout_s=60).sync() as fleet:
        yield fleet


def _record_placements(fleet: SyncEnvFleet, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Spies on the fleet's real `acquire`: the server id each episode's session went to."""
    placed: list[str] = []
    acquire = fleet.acquire

    def spy(timeout_s: float | None = None) -> Any:
        client = acquire(timeout_s)
        server = fleet.fleet.server_of(client.async_client)
        assert server is not None
        placed.append(server.id)
        return client

    monkeypatch.setattr(fleet, "acquire", spy)
    return placed


def _kill_busy_server(fleet: SyncEnvFleet) -> str:
    """SIGKILLs the server holding the one open session; returns its id."""
    busy = [s for s, load in zip(fleet.servers(), fleet.stats().load, strict=True) if load]
    assert len(busy) == 1, fleet.stats()
    os.kill(busy[0].info["pid"], signal.SIGKILL)
    return busy[0].id


def test_grpo_steps_over_a_fleet_use_both_servers(
    math_fleet: SyncEnvFleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    placed = _record_placements(math_fleet, monkeypatch)
    recorder = Recorder(
        rollout_func(
            fleet=math_fleet,
            prompt_builder=_question,
            task_builder=lambda prompt: {"seed": int(prompt)},
            max_concurrency=2,
        )
    )
    trainer, before = _trainer(tmp_path, recorder, max_steps=3)
    trainer.train()

    assert trainer.state.global_step == 3
    for batch in recorder.batches:
        assert [m["step_count"] for m in batch["verify_metrics"]] == [1, 1, 1, 1]
        assert not any(batch["infra_failed"])
        assert set(batch["env_reward"]) <= {0.0, 0.2, 1.0}
    assert recorder.scored == [batch["env_reward"] for batch in recorder.batches]
    # Every episode had its own session, and the fleet spread them over both servers.
    assert len(placed) == 4 * len(recorder.batches)
    assert set(placed) == {server.id for server in math_fleet.servers()}
    assert math_fleet.stats().sessions == 0  # each released after its episode
    assert any(
        not torch.equal(p.detach().cpu(), before[n]) for n, p in trainer.model.named_parameters()
    )


class KillsAServer:
    """Session factory that SIGKILLs the server of the batch's third episode right after its
    reset (its step then meets a dead server)."""

    def __init__(self, fleet: SyncEnvFleet) -> None:
        self.sessions = FleetSessionFactory(fleet)
        self.fleet = fleet
        self.opened = 0
        self.victim: str | None = None

    def create(self, task: Any, seed: int | None = None, episode_id: str | None = None) -> Any:
        session = self.sessions.create(task, seed=seed, episode_id=episode_id)
        self.opened += 1
        if self.opened == 3:
            self.victim = _kill_busy_server(self.fleet)
        return session


def test_an_episode_on_a_killed_fleet_server_is_retried_on_a_live_one(
    math_fleet: SyncEnvFleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    placed = _record_placements(math_fleet, monkeypatch)
    killer = KillsAServer(math_fleet)
    recorder = Recorder(
        rollout_func(
            session_factory=killer,
            prompt_builder=_question,
            task_builder=lambda prompt: {"seed": int(prompt)},
            infra_retries=2,
        )
    )
    trainer, _ = _trainer(tmp_path, recorder, max_steps=1)
    trainer.train()

    assert killer.victim is not None and math_fleet.stats().servers_lost >= 1
    # Four episodes and one retry; the retry went to a server that was alive.
    assert len(placed) == 5 and placed[2] == killer.victim and placed[4] != killer.victim
    (batch,) = recorder.batches
    assert not any(batch["infra_failed"])
    # The retried episode was stepped and scored by the environment, like the others.
    assert [m["step_count"] for m in batch["verify_metrics"]] == [1, 1, 1, 1]
    assert recorder.scored == [batch["env_reward"]]


def test_a_killed_fleet_server_without_retries_refuses_the_batch(
    math_fleet: SyncEnvFleet, tmp_path: Path
) -> None:
    killer = KillsAServer(math_fleet)
    recorder = Recorder(
        rollout_func(
            session_factory=killer,
            prompt_builder=_question,
            task_builder=lambda prompt: {"seed": int(prompt)},
            infra_retries=0,
        )
    )
    trainer, before = _trainer(tmp_path, recorder, max_steps=1)
    with pytest.raises(RolloutInfrastructureError) as caught:
        trainer.train()

    # Only the third episode met the dead server: the fleet says so, and nothing was scored.
    assert list(caught.value.errors) == [2]
    assert "ServerLostError" in caught.value.errors[2]
    assert recorder.scored == []
    assert all(
        torch.equal(p.detach().cpu(), before[n]) for n, p in trainer.model.named_parameters()
    )


def test_environment_factory_over_a_fleet_recovers_from_a_killed_server(
    math_fleet: SyncEnvFleet,
) -> None:
    from openenv.integrations.trl import environment_factory

    make = environment_factory(fleet=math_fleet, observation_text=_question_only)
    env = make()
    question = env.reset(seed=3)
    assert question is not None and question.startswith("What is ")
    assert math_fleet.stats().sessions == 1
    env.act(answer="many")  # type: ignore[attr-defined]
    assert env.get_reward() == 0.0 and env.steps == 1

    _kill_busy_server(math_fleet)
    with pytest.raises(ServerLostError):
        env.act(answer="3")  # type: ignore[attr-defined]
    with pytest.raises(RolloutInfrastructureError) as caught:
        env.get_reward()  # never a 0 for the lost episode
    assert "ServerLostError" in caught.value.errors[0]

    # The next rollout's reset releases the lost session and gets one on a live server.
    assert env.reset(seed=4) is not None
    env.act(answer="many")  # type: ignore[attr-defined]
    assert env.get_reward() == 0.0 and env.steps == 1
    assert math_fleet.stats().sessions == 1


def test_environment_factory_over_a_fleet_of_an_mcp_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The MCP tools are listed through a session from the fleet (released after)."""
    from openenv.integrations.trl import close_environments, environment_factory

    monkeypatch.setenv("OPENENV_STATE_DIR", str(tmp_path / "state"))
    with EnvFleet("echo", servers=2).sync() as fleet:
        env = environment_factory(fleet=fleet)()
        assert fleet.stats().sessions == 0  # the session that listed the tools went back
        env.reset()
        assert env.echo_message(message="hi") == "hi"  # type: ignore[attr-defined]
        assert env.steps == 1 and fleet.stats().sessions == 1
        close_environments(type("Trainer", (), {"_environment_pool": {0: [env]}})())
        assert fleet.stats().sessions == 0
