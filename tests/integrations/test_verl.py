"""verl adapter against the real `verl` package: the tools are built by verl's own
`initialize_tools_from_config` from a tool yaml, and called through `ToolAgentLoop._call_tool`
(verl's code for one model tool call: create, execute, release) on real servers. One test
runs a whole rollout through verl's `ToolAgentLoop.run` (its prompt tokenization, hermes tool
parser and tool calls), with a tokenizer trained on the spot and a scripted model server in
place of vLLM (no model weights can be downloaded or run here).

verl is not in this project's environment (it pulls ray, wandb, tensorboard and a CUDA torch
by default); these tests skip without it. docs/training.md says how they were run
here: verl 0.9.1 on the CPU torch wheel, in a venv of its own."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from openenv.integrations._episodes import EnvironmentInfrastructureError

from .conftest import kill, solve

#: Importing verl (ray, transformers) alone takes tens of seconds here.
pytestmark = pytest.mark.slow

pytest.importorskip("verl", reason="verl is not installed (see docs/training.md)")

from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap  # noqa: E402
from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop  # noqa: E402
from verl.experimental.agent_loop.tool_parser import FunctionCall  # noqa: E402
from verl.tools.tool_registry import initialize_tools_from_config  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

from openenv.integrations import verl as verl_adapter  # noqa: E402


def load_tools(tmp_path: Path, base_url: str, **config) -> dict:
    path = tmp_path / "tools.yaml"
    config = {"type": "native", "base_url": base_url, **config}
    tool = {"class_name": "openenv.integrations.verl.OpenEnvTool", "config": config}
    path.write_text(json.dumps({"tools": [tool]}))  # JSON is YAML
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
