"""verl adapter against the real `verl` package: the tools are built by verl's own
`initialize_tools_from_config` from a tool yaml, and called through `ToolAgentLoop._call_tool`
(verl's code for one model tool call: create, execute, release) on real servers. One test
runs a whole rollout through verl's `ToolAgentLoop.run` (its prompt tokenization, hermes tool
parser and tool calls), with a tokenizer trained on the spot and a scripted model server.
Another runs verl's `AgentLoopWorker.generate_sequences` (the rollout worker its trainer calls:
verl's own config, tool loading, `ToolAgentLoop`, padding into a training batch) with the real
SmolLM2-135M-Instruct generating on the CPU, in place of verl's vLLM server.

verl is not in this project's environment (it pins transformers below 5.11 and pulls ray,
wandb and tensorboard); these tests skip without it. .ci/run installs it in a venv of its own
and runs them there with OPENENV_REQUIRE_VERL=1, which turns every skip into a failure.
docs/training.md says how."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from openenv.integrations._episodes import EnvironmentInfrastructureError

from .conftest import kill, solve

#: Importing verl (ray, transformers) alone takes tens of seconds here.
pytestmark = pytest.mark.slow

#: Set by .ci/run's verl step: verl and the model must be there, a skip would hide their absence.
REQUIRED = os.environ.get("OPENENV_REQUIRE_VERL") == "1"

if REQUIRED:
    import verl  # noqa: F401  (ImportError fails the run)
else:
    pytest.importorskip(
        "verl", reason="verl is not installed: .ci/run tests it in its own venv (docs/training.md)"
    )

from verl.experimental.agent_loop.agent_loop import (  # noqa: E402
    AgentLoopWorker,
    DictConfigWrap,
    ToolListWrap,
)
from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop  # noqa: E402
from verl.experimental.agent_loop.tool_parser import FunctionCall  # noqa: E402
from verl.protocol import DataProto  # noqa: E402
from verl.tools.tool_registry import initialize_tools_from_config  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

from openenv.integrations import verl as verl_adapter  # noqa: E402


def tool_yaml(tmp_path: Path, base_url: str, **config) -> Path:
    path = tmp_path / "tools.yaml"
    config = {"type": "native", "base_url": base_url, **config}
    tool = {"class_name": "openenv.integrations.verl.OpenEnvTool", "config": config}
    path.write_text(json.dumps({"tools": [tool]}))  # JSON is YAML
    return path


def load_tools(tmp_path: Path, base_url: str, **config) -> dict:
    path = tool_yaml(tmp_path, base_url, **config)
    return {tool.name: tool for tool in initialize_tools_from_config(str(path))}


def agent_loop(tools: dict) -> ToolAgentLoop:
    """Just the state `_call_tool` reads: building a whole loop needs a model server."""
    loop = object.__new__(ToolAgentLoop)
    loop.tools = tools
    loop.max_tool_response_length = 4096
    loop.tool_response_truncate_side = "middle"
    return loop


def trajectory(request_id: str) -> SimpleNamespace:
    return SimpleNamespace(request_id=request_id, extra_fields={})


async def call(loop, agent_data, name: str, arguments: dict, seed: int):
    tools_kwargs = {name: {"create_kwargs": {"seed": seed}}}
    tool_call = FunctionCall(name=name, arguments=json.dumps(arguments))
    return await loop._call_tool(tool_call, tools_kwargs, agent_data)


async def test_episode_through_verls_tool_loop(tmp_path: Path, math_url: str) -> None:
    tools = load_tools(tmp_path, math_url)
    assert list(tools) == ["act"]
    schema = tools["act"].get_openai_tool_schema()
    assert "answer" in schema.function.parameters.properties
    prompt = verl_adapter.ServedEnv(math_url).episode(seed=5)
    question = prompt.initial_text()
    prompt.close()

    loop, data = agent_loop(tools), trajectory("traj-1")
    rewards = []
    text = question
    for _ in range(3):
        response, reward, metrics = await call(loop, data, "act", {"answer": solve(text)}, 5)
        rewards.append(reward)
        text = response.text
    assert rewards == [1.0, 1.0, 1.0]
    assert metrics["env_done"] is True
    assert data.extra_fields == {}
    # The episode closed when the environment said done; its reward is still reported.
    assert await tools["act"].calc_reward("any", agent_data=data) == 3.0
    # Acting after the end is the model's mistake, not the start of a new episode.
    response, reward, metrics = await call(loop, data, "act", {"answer": "1"}, 5)
    assert metrics["invalid_action"] is True and "over" in response.text


async def test_mcp_tools_share_the_trajectorys_episode(tmp_path: Path, echo_url: str) -> None:
    tools = load_tools(tmp_path, echo_url, tool_name="echo_message")
    loop, data = agent_loop(tools), trajectory("traj-2")
    response, _reward, _ = await call(loop, data, "echo_message", {"message": "hello"}, 0)
    assert "hello" in response.text
    verl_adapter.close_trajectory("traj-2")


@pytest.mark.slow  # a server process of its own, and the client's reconnect attempts
async def test_env_killed_mid_episode_is_flagged_not_scored(tmp_path: Path, doomed_server) -> None:
    tools = load_tools(tmp_path, doomed_server.url)
    loop, data = agent_loop(tools), trajectory("traj-3")
    await call(loop, data, "act", {"answer": "1"}, 9)
    kill(doomed_server)
    # verl's loop turns a raised tool error into text with tool reward 0.0 ...
    response, _reward, _ = await call(loop, data, "act", {"answer": "2"}, 9)
    assert "EnvironmentInfrastructureError" in response.text or "environment" in response.text
    # ... so the adapter marks the trajectory, and the reward function refuses it.
    assert verl_adapter.INFRA_ERROR_FIELD in data.extra_fields
    with pytest.raises(EnvironmentInfrastructureError):
        verl_adapter.raise_if_infrastructure_failed(data.extra_fields)


def chat_tokenizer():
    """A byte-level BPE tokenizer trained on the spot, with a ChatML template: what verl's
    prompt builder and hermes tool parser need, without downloading a model's."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<unk>", "<pad>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    corpus = ['What is 1 + 2? {"name": "act", "arguments": {"answer": "3"}} user tool'] * 10
    tokenizer.train_from_iterator(corpus, trainer)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="<unk>", pad_token="<pad>", eos_token="<|im_end|>"
    )
    hf.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    return hf


class ScriptedModelServer:
    """Stands in for verl's vLLM server manager (`generate` -> `TokenOutput`): it reads the
    prompt's last question and answers it with a hermes tool call, and stops once the
    environment said done."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    async def generate(self, request_id, prompt_ids, sampling_params, **kwargs) -> TokenOutput:
        text = self.tokenizer.decode(prompt_ids)
        if '"done": true' in text:
            reply = "Done.<|im_end|>"
        else:
            answer = solve(text)
            call = json.dumps({"name": "act", "arguments": {"answer": answer}})
            reply = f"<tool_call>{call}</tool_call><|im_end|>"
        ids = self.tokenizer.encode(reply, add_special_tokens=False)
        return TokenOutput(token_ids=ids)


async def test_whole_rollout_through_verls_tool_agent_loop(tmp_path: Path, math_url: str) -> None:
    from omegaconf import OmegaConf

    tools = load_tools(tmp_path, math_url)
    tokenizer = chat_tokenizer()
    multi_turn = {
        "max_user_turns": 5,
        "max_assistant_turns": 5,
        "max_parallel_calls": 1,
        "max_tool_response_length": 4096,
        "tool_response_truncate_side": "middle",
        "format": "hermes",
    }
    rollout = {
        "prompt_length": 4096,
        "response_length": 4096,
        "full_determinism": False,
        "multi_turn": multi_turn,
    }
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": rollout}})
    loop = ToolAgentLoop(
        trainer_config=DictConfigWrap(config),
        server_manager=ScriptedModelServer(tokenizer),
        tokenizer=tokenizer,
        processor=None,
        dataset_cls=None,
        data_config=DictConfigWrap(OmegaConf.create({})),
        tools=ToolListWrap(list(tools.values())),
    )
    first = verl_adapter.ServedEnv(math_url).episode(seed=5)
    prompt = first.initial_messages()
    first.close()

    output = await loop.run(
        {}, raw_prompt=prompt, tools_kwargs={"act": {"create_kwargs": {"seed": 5}}}
    )
    assert output.extra_fields["tool_rewards"] == [1.0, 1.0, 1.0]
    assert verl_adapter.INFRA_ERROR_FIELD not in output.extra_fields
    assert sum(output.response_mask) > 0  # the model's tokens are there to train on


@pytest.fixture(scope="module")
def smollm():
    """SmolLM2-135M-Instruct on the CPU: `(checkpoint folder, model, tokenizer)`."""
    from openenv.models.checkpoint import ModelNotInstalledError, ensure_checkpoint, load_model

    try:
        folder = ensure_checkpoint()
    except ModelNotInstalledError as exc:
        if REQUIRED:
            raise
        pytest.skip(str(exc))
    model, tokenizer = load_model(folder)
    return folder, model, tokenizer


class SmolLMServer:
    """The real model behind verl's rollout, in place of its vLLM server: the call verl's
    `LLMServerClient` makes (`generate(request_id, prompt_ids=, sampling_params=)` ->
    `TokenOutput` with token ids and per-token logprobs), answered by transformers' `generate`.
    Greedy when verl asks for temperature 0 (its validation rollouts); otherwise sampled with
    verl's temperature, top_p and top_k, the logprobs then being of the processed distribution
    (verl's default `logprobs_mode: processed_logprobs`)."""

    #: New tokens per model turn: enough for a tool call, cheap on a CPU.
    MAX_NEW_TOKENS = 40

    def __init__(self, model, tokenizer) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.replies: list[str] = []

    def _generate(self, prompt_ids: list[int], params: dict) -> TokenOutput:
        import torch

        temperature = float(params.get("temperature") or 0.0)
        sampling = {}
        if temperature > 0:
            top_k = int(params.get("top_k") or -1)
            sampling = {
                "do_sample": True,
                "temperature": temperature,
                "top_p": float(params.get("top_p") or 1.0),
                "top_k": top_k if top_k > 0 else None,
            }
        stop = [self.tokenizer.eos_token_id, *(params.get("stop_token_ids") or [])]
        ids = torch.tensor([prompt_ids])
        with torch.no_grad():
            out = self.model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=min(int(params.get("max_tokens") or 1 << 30), self.MAX_NEW_TOKENS),
                do_sample=bool(sampling),
                **sampling,
                eos_token_id=stop,
                pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id,
                return_dict_in_generate=True,
                output_scores=True,
            )
        new = out.sequences[0, len(prompt_ids) :].tolist()
        logprobs = [
            torch.log_softmax(scores[0].float(), dim=-1)[token].item()
            for scores, token in zip(out.scores, new, strict=True)
        ]
        self.replies.append(self.tokenizer.decode(new))
        stop_reason = "completed" if new and new[-1] in stop else "length"
        return TokenOutput(token_ids=new, log_probs=logprobs, stop_reason=stop_reason)

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs) -> TokenOutput:
        return await asyncio.to_thread(self._generate, list(prompt_ids), dict(sampling_params))


def verl_config(model_folder: Path, tools_path: Path):
    """verl's own trainer config (its `ppo_trainer.yaml`, composed by hydra as its
    `main_ppo` does) for a multi-turn tool rollout of the model at `model_folder`."""
    import verl.trainer.config
    from hydra import compose, initialize_config_dir

    overrides = [
        f"actor_rollout_ref.model.path={model_folder}",
        "actor_rollout_ref.rollout.name=vllm",  # read only by the servers it replaces here
        "actor_rollout_ref.rollout.prompt_length=1024",
        "actor_rollout_ref.rollout.response_length=512",
        "actor_rollout_ref.rollout.multi_turn.enable=true",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tools_path}",
        # Two model turns: a tool call, the environment's reply, then the model again.
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2",
        "actor_rollout_ref.rollout.multi_turn.format=hermes",
        "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent",
    ]
    config_dir = str(Path(verl.trainer.config.__file__).parent)
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose("ppo_trainer", overrides=overrides)


def tool_call_prompt(math_url: str, seed: int) -> list[dict]:
    """The episode's task, after one worked example (another seed's question answered with a
    hermes tool call): SmolLM2's chat template does not render tool schemas, and a 135M model
    needs the example to write the call."""
    example = verl_adapter.ServedEnv(math_url).episode(seed=seed + 1000)
    shown = example.initial_messages()
    example.close()
    call = json.dumps({"name": "act", "arguments": {"answer": solve(shown[-1]["content"])}})
    task = verl_adapter.ServedEnv(math_url).episode(seed=seed)
    messages = task.initial_messages()
    task.close()
    system = (
        "You answer by calling the tool act, written as "
        '<tool_call>{"name": "act", "arguments": {"answer": "<the number>"}}</tool_call>'
    )
    return [
        {"role": "system", "content": system},
        *shown,
        {"role": "assistant", "content": f"<tool_call>{call}</tool_call>"},
        *messages,
    ]


@pytest.mark.timeout(900)  # a CPU model, two turns; minutes on a loaded 2-core machine
async def test_real_model_rollout_through_verls_agent_loop_worker(
    tmp_path: Path, math_url: str, smollm
) -> None:
    import torch

    folder, model, tokenizer = smollm
    config = verl_config(folder, tool_yaml(tmp_path, math_url))
    server = SmolLMServer(model, tokenizer)
    # verl's rollout worker, in this process rather than as a Ray actor: it loads the tokenizer
    # from the checkpoint, the tools from the yaml, and runs `ToolAgentLoop` for each row.
    worker = AgentLoopWorker(config, llm_client=server)
    seed = 5
    rows = {
        "raw_prompt": [tool_call_prompt(math_url, seed)],
        "tools_kwargs": [{"act": {"create_kwargs": {"seed": seed}}}],
        "agent_name": ["tool_agent"],
    }
    batch = DataProto.from_dict(
        non_tensors={key: _objects(value) for key, value in rows.items()},
        meta_info={"validate": True},  # verl's validation sampling: greedy, so reproducible
    )
    out = await worker.generate_sequences(batch)
    print("model replies:", server.replies)  # shown when an assertion below fails

    # One tool call ran (the second model turn is the last: max_assistant_turns=2).
    tool_rewards = out.non_tensor_batch["tool_rewards"][0]
    assert len(tool_rewards) == 1, f"the model made no tool call: {server.replies}"
    assert out.non_tensor_batch.get(verl_adapter.INFRA_ERROR_FIELD) is None

    # The training batch: model tokens (mask 1), the environment's reply (mask 0), model again.
    prompt_length = out.batch["prompts"].shape[1]
    attention = out.batch["attention_mask"][0]
    length = int(attention[prompt_length:].sum())
    mask = out.batch["response_mask"][0][:length].tolist()
    responses = out.batch["responses"][0][:length]
    runs = [value for value, _ in itertools.groupby(mask)]
    assert runs == [1, 0, 1], mask
    first_end = mask.index(0)
    second_start = first_end + mask[first_end:].index(1)
    first_reply = tokenizer.decode(responses[:first_end])
    env_reply = tokenizer.decode(responses[first_end:second_start])
    assert first_reply.strip() == server.replies[0].strip()
    assert '"question"' in env_reply  # the math environment's observation, as the tool response

    # The tool reward is the environment's: replaying the model's answer on a fresh episode of
    # the same seed scores the same.
    called = json.loads(re.search(r"<tool_call>(.*?)</tool_call>", first_reply, re.S).group(1))
    replay = verl_adapter.ServedEnv(math_url).episode(seed=seed)
    try:
        assert replay.call_tool("act", called["arguments"]).reward == tool_rewards[0]
    finally:
        replay.close()

    # The logprobs verl keeps for the model's tokens are the model's own: one forward pass
    # over the whole sequence gives the same values at every masked-in position.
    input_ids = out.batch["input_ids"][0][attention.bool()]
    start = int(attention[:prompt_length].sum())
    with torch.no_grad():
        logits = model(input_ids[None]).logits[0].float()
    recomputed = torch.log_softmax(logits[start - 1 : start - 1 + length], dim=-1)
    recomputed = recomputed.gather(1, responses[:, None]).squeeze(1)
    kept = out.batch["rollout_log_probs"][0][:length]
    model_tokens = torch.tensor(mask, dtype=torch.bool)
    assert torch.allclose(kept[model_tokens], recomputed[model_tokens], atol=1e-3)
    assert (kept[~model_tokens] == 0).all()


def _objects(values: list):
    import numpy as np

    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array
