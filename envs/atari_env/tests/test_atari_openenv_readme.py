"""The client code of OpenEnv's atari_env README, run against this Atari environment.

The snippets are OpenEnv's, unchanged but for the server address (and the example training
loop, cut to a few steps): `screen`, `screen_shape`, `legal_actions`, `lives` and the state's
fields read as OpenEnv documents them. This package's client asks for raw-bytes frames, so these
tests also show `obs.screen` decoded from them equals the flat list OpenEnv's clients receive.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import numpy as np
import pytest

from atari_env import AtariAction, AtariEnv
from openenv.core import GenericEnvClient
from tests.support.server import serve

APP = "atari_env.server.app:app"


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with serve(APP) as server:
        yield server.url


def test_readme_async_quick_start(base_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    async def main():
        # Start local server manually: python -m atari_env.server.app
        async with AtariEnv(base_url=base_url) as env:
            # Reset environment
            result = await env.reset()
            print(f"Screen shape: {result.observation.screen_shape}")
            print(f"Legal actions: {result.observation.legal_actions}")

            # Take actions
            for _ in range(10):
                result = await env.step(AtariAction(action_id=2, game_name="pong"))
                print(f"Reward: {result.reward}, Done: {result.done}")
                if result.done:
                    break

    asyncio.run(main())
    out = capsys.readouterr().out
    assert "Screen shape: [210, 160, 3]" in out
    assert "Legal actions: [0, 1, 2, 3, 4, 5]" in out
    assert out.count("Reward: 0.0, Done: False") == 10  # no point is scored in 40 frames


def test_readme_sync_usage(base_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    with AtariEnv(base_url=base_url).sync() as env:
        result = env.reset()
        result = env.step(AtariAction(action_id=2, game_name="pong"))
        print(f"Reward: {result.reward}")
    assert capsys.readouterr().out == "Reward: 0.0\n"


def test_readme_screen_reshape_matches_the_plain_frame(base_url: str) -> None:
    async def main():
        async with AtariEnv(base_url=base_url) as client:
            result = await client.reset(seed=0)
            result = await client.step(AtariAction(action_id=2))  # UP

            # Reshape screen for visualization
            screen = np.array(result.observation.screen).reshape(result.observation.screen_shape)
            print(f"Screen shape: {screen.shape}")  # (210, 160, 3) for RGB
            return screen, result.observation

    screen, obs = asyncio.run(main())
    assert screen.shape == (210, 160, 3) and obs.frame_format == "bytes"
    assert obs.screen_values is None  # raw bytes on the wire; `screen` decoded on access
    # The same episode as a client that names no format (OpenEnv's) sees it: a flat int list.
    with GenericEnvClient(base_url=base_url) as plain:
        plain.reset(seed=0)
        seen = plain.step({"action_id": 2}).observation
    assert seen["frame_format"] == "list" and "frame_b64" in seen and seen["frame_b64"] is None
    assert seen["screen_shape"] == [210, 160, 3] and obs.screen == seen["screen"]


def test_readme_local_testing_snippet(base_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    with AtariEnv(base_url=base_url).sync() as env:
        result = env.reset()
        print(f"Initial obs: {result.observation.screen_shape}")
        result = env.step(AtariAction(action_id=2))
        print(f"After step: reward={result.reward}, done={result.done}")
        state = env.state()
    assert capsys.readouterr().out == (
        "Initial obs: [210, 160, 3]\nAfter step: reward=0.0, done=False\n"
    )
    # The README's AtariState fields, with OpenEnv's defaults.
    assert (state.game_name, state.obs_type, state.full_action_space) == ("pong", "rgb", False)
    assert (state.mode, state.difficulty, state.frameskip) == (None, None, 4)
    assert state.repeat_action_probability == 0.0 and state.step_count == 1


def test_readme_training_loop_shortened(base_url: str) -> None:
    """The README's example script with its episode cut at 30 steps (a Pong game is long)."""

    async def train():
        async with AtariEnv(base_url=base_url) as client:
            for episode in range(2):
                result = await client.reset(max_episode_steps=30)
                episode_reward = 0
                steps = 0
                while not result.done:
                    action_id = np.random.choice(result.observation.legal_actions)
                    result = await client.step(AtariAction(action_id=int(action_id)))
                    episode_reward += result.reward or 0
                    steps += 1
                    screen = np.array(result.observation.screen).reshape(
                        result.observation.screen_shape
                    )
                print(f"Episode {episode}: reward={episode_reward:.2f}, steps={steps}")
                assert screen.shape == (210, 160, 3) and screen.dtype.kind in "iu"
            return steps, result.observation

    steps, last = asyncio.run(train())
    assert steps == 30 and last.truncated and last.lives == 0
    assert last.episode_frame_number == 30 * 4 and last.frame_number >= 2 * 30 * 4


@pytest.mark.parametrize(
    ("variables", "shape", "actions"),
    [
        ({"ATARI_GAME": "breakout", "ATARI_OBS_TYPE": "grayscale"}, [210, 160], 4),
        ({"ATARI_OBS_TYPE": "ram", "ATARI_FULL_ACTION_SPACE": "true"}, [128], 18),
    ],
)
def test_readme_environment_variables(
    variables: dict[str, str], shape: list[int], actions: int
) -> None:
    with serve(APP, env=variables, in_process=False) as server:
        with AtariEnv(base_url=server.url).sync() as env:
            result = env.reset()
            result = env.step(AtariAction(action_id=actions - 1))
            screen = np.array(result.observation.screen).reshape(result.observation.screen_shape)
            state = env.state()
    assert list(screen.shape) == shape and result.observation.legal_actions == list(range(actions))
    assert state.game_name == variables.get("ATARI_GAME", "pong")
    assert state.obs_type == variables["ATARI_OBS_TYPE"]
    assert state.full_action_space is ("ATARI_FULL_ACTION_SPACE" in variables)
