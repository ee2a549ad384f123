"""SkyRL adapter against the real `skyrl_gym` package (`BaseTextEnv`, its registry and
`make`) and real servers: episodes are played through `init`/`step` as SkyRL's generator does."""

from __future__ import annotations

import json

import pytest

from openenv.integrations import skyrl as skyrl_adapter
from openenv.integrations._episodes import EnvironmentInfrastructureError

from .conftest import kill, solve

skyrl_gym = pytest.importorskip("skyrl_gym", reason="skyrl-gym is not installed (trainers extra)")
DictConfig = pytest.importorskip("omegaconf").DictConfig


def make_env(base_url: str, **extras):
    skyrl_adapter.register_skyrl_env("openenv-test")
    # As SkyRL's generator does: the env's config section is a DictConfig.
    config = DictConfig({"base_url": base_url, "max_turns": 5})
    return skyrl_gym.make("openenv-test", env_config=config, extras=extras)


def play(env, policy) -> list[dict]:
    prompt, _info = env.init([{"role": "system", "content": "Answer with a number."}])
    conversation = list(prompt)
    outputs = []
    while True:
        reply = policy(conversation)
        out = env.step(reply)
        outputs.append(out)
        conversation += [{"role": "assistant", "content": reply}, *out["observations"]]
        if out["done"]:
            return outputs


def test_is_a_skyrl_text_env_and_rewards_come_from_the_env(math_url: str) -> None:
    from skyrl_gym.envs.base_text_env import BaseTextEnv

    env = make_env(math_url, extra_info={"seed": 7})
    try:
        assert isinstance(env, BaseTextEnv)
        outputs = play(env, lambda conversation: solve(conversation[-1]["content"]))
        # Three questions, all right: the math environment's rubric gives 1.0 each.
        assert [o["reward"] for o in outputs] == [1.0, 1.0, 1.0]
        assert outputs[-1]["done"] and outputs[-1]["observations"] == []
        assert env.get_metrics()["env_done"] is True
    finally:
        env.close()


def test_wrong_answers_score_what_the_env_says(math_url: str) -> None:
    env = make_env(math_url, seed=7)
    try:
        outputs = play(env, lambda conversation: "-1")
        # The math rubric's partial credit for a well-formed wrong number: the env's, not ours.
        assert [o["reward"] for o in outputs] == [0.2, 0.2, 0.2]
        assert "wrong" in json.dumps(outputs[0]["observations"])
    finally:
        env.close()


def test_mcp_tool_calls_in_text(echo_url: str) -> None:
    env = make_env(echo_url)
    try:
        _prompt, info = env.init([])
        assert "echo_message" in info["tools"]
        call = '<tool_call>{"name": "echo_message", "arguments": {"message": "hi"}}</tool_call>'
        out = env.step(call)
        assert "hi" in out["observations"][0]["content"]
        bad = env.step("no tool call here")
        assert bad["metadata"]["invalid_action"] is True
        assert bad["done"] is False
    finally:
        env.close()


@pytest.mark.slow  # a server process of its own, and the client's reconnect attempts
def test_env_killed_mid_episode_is_an_infrastructure_error(doomed_server) -> None:
    env = make_env(doomed_server.url, seed=1)
    try:
        prompt, _ = env.init([])
        env.step(solve(prompt[-1]["content"]))
        kill(doomed_server)
        with pytest.raises(EnvironmentInfrastructureError) as caught:
            env.step("42")
        assert caught.value.category == "infrastructure"
    finally:
        env.close()
