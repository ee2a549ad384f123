"""AutoEnv and AutoAction against real servers: typed clients, the generic fallback, errors."""

from __future__ import annotations

import pytest

import openenv
from echo_env import EchoEnv
from grid_world_env import GridWorldEnv, GridWorldObservation
from openenv.auto import (
    AutoAction,
    AutoEnv,
    AutoEnvError,
    BaseURLRequiredError,
    EnvironmentNotFoundError,
)
from openenv.core import GenericAction, GenericEnvClient
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation
from tests.support.server import RunningServer

HELLO = "Hello, AutoEnv!"


def test_echo_from_env_plays_a_tool_call_through_sync(echo_server: RunningServer):
    client = AutoEnv.from_env("openenv-echo", base_url=echo_server.url)
    assert type(client) is EchoEnv
    action_cls = AutoAction.from_env("echo")
    assert action_cls is CallToolAction
    with client.sync() as env:
        reset = env.reset()
        assert reset.done is False
        result = env.step(action_cls(tool_name="echo_message", arguments={"message": HELLO}))
        assert isinstance(result.observation, CallToolObservation)
        assert result.observation.error is None
        assert result.observation.result["data"] == HELLO
        assert env.state().step_count == 1


async def test_echo_from_env_is_an_async_client_and_passes_kwargs(echo_server: RunningServer):
    client = AutoEnv.from_env("echo_env", base_url=echo_server.url, message_timeout_s=7.5)
    assert client.message_timeout_s == 7.5
    async with client as env:
        await env.reset()
        action = CallToolAction(tool_name="echo_message", arguments={"message": "a"})
        result = await env.step(action)
        assert result.observation.result["data"] == "a"


def test_grid_world_from_env_is_typed(grid_server: RunningServer):
    client = AutoEnv.from_env("Grid-World", base_url=grid_server.url)
    assert type(client) is GridWorldEnv
    action_cls = AutoAction.from_env("openenv-grid-world")
    with client.sync() as env:
        reset = env.reset()
        assert reset.observation.position == [0, 0]
        result = env.step(action_cls(direction="RIGHT"))
        assert isinstance(result.observation, GridWorldObservation)
        assert result.observation.position == [0, 1]
        assert env.state().step_count == 1


def test_unknown_name_with_a_base_url_is_refused_not_guessed(echo_server: RunningServer):
    # As in OpenEnv: a name nothing answers to is an error even with a server to talk to;
    # the generic client is there for whoever asks for it (skip_install=True).
    with pytest.raises(EnvironmentNotFoundError) as caught:
        AutoEnv.from_env("not-installed-anywhere", base_url=echo_server.url)
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, LookupError)
    assert "skip_install=True" in str(caught.value) and "echo" in str(caught.value)
    with pytest.raises(ValueError):  # how code written for OpenEnv catches it
        AutoAction.from_env("not-installed-anywhere")
    client = AutoEnv.from_env("not-installed-anywhere", base_url=echo_server.url, skip_install=True)
    assert type(client) is GenericEnvClient
    action = {"type": "call_tool", "tool_name": "echo_message", "arguments": {"message": HELLO}}
    with client.sync() as env:
        env.reset()
        result = env.step(action)
        assert isinstance(result.observation, dict)
        assert result.observation["result"]["data"] == HELLO


def test_skip_install_gives_the_generic_client_and_action(echo_server: RunningServer):
    client = AutoEnv.from_env("echo", base_url=echo_server.url, skip_install=True)
    assert type(client) is GenericEnvClient
    action_cls = AutoAction.from_env("echo", skip_install=True)
    assert action_cls is GenericAction
    action = action_cls(type="call_tool", tool_name="echo_message", arguments={"message": "b"})
    with client.sync() as env:
        env.reset()
        assert env.step(action).observation["result"]["data"] == "b"


def test_unknown_name_without_base_url_is_a_typed_error():
    with pytest.raises(EnvironmentNotFoundError) as caught:
        AutoEnv.from_env("not-installed-anywhere")
    message = str(caught.value)
    assert "installed: " in message and "echo" in message
    assert " -e PATH/TO/not_installed_anywhere_env`" in message
    assert "base_url" in message
    with pytest.raises(EnvironmentNotFoundError, match="skip_install=True"):
        AutoAction.from_env("not-installed-anywhere")


def test_skip_install_without_base_url_or_image_says_what_to_pass():
    # Without the package there is nothing to start locally. (Starting an installed
    # environment without base_url is tested with real processes in tests/providers.)
    with pytest.raises(BaseURLRequiredError, match="base_url"):
        AutoEnv.from_env("echo", skip_install=True)


def test_environment_options_with_a_base_url_are_refused():
    with pytest.raises(AutoEnvError, match="already running"):
        AutoEnv.from_env("echo", base_url="http://127.0.0.1:9", limits={"memory_mb": 64})


def test_factories_cannot_be_instantiated():
    with pytest.raises(TypeError, match=r"AutoEnv\.from_env"):
        AutoEnv()
    with pytest.raises(TypeError, match=r"AutoAction\.from_env"):
        AutoAction()


def test_info_and_lazy_exports():
    info = AutoEnv.get_env_info("echo")
    assert info["client"] == "echo_env.client:EchoEnv"
    assert info["env_class"] == "EchoEnv"
    action_info = AutoAction.get_action_info("echo")
    assert action_info["action_class"] == "CallToolAction"
    assert (action_info["env_name"], action_info["module"]) == ("echo_env", "echo_env.client")
    assert info["module"] == "echo_env.client"
    assert AutoEnv.get_env_class("echo") is EchoEnv
    assert openenv.AutoEnv is AutoEnv
    assert openenv.AutoAction is AutoAction
