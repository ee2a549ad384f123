"""Emulators in worker processes (`ATARI_EMULATOR_PROCESSES`): the same episodes as in the
server process, ale-py's refusals still name the option, a lost process is infrastructure."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from atari_env import AtariAction, AtariEnv, decode_frame
from atari_env.server.atari_environment import AtariEnvironment, PooledAtariEnvironment
from atari_env.server.emulators import EmulatorPool, RemoteEmulator, processes_setting
from openenv.core.errors import InvalidActionError, InvalidRequestError, ServerError
from openenv.testing import running_server

APP = "atari_env.server.app:app"
Seen = list[tuple[Any, ...]]


def play(env: AtariEnvironment, steps: int = 80, **reset: Any) -> Seen:
    obs = env.reset(**reset)
    seen: Seen = [(obs.frame_bytes, obs.frame_b64, obs.frame_number, obs.episode_frame_number)]
    for i in range(steps):
        if obs.done:
            break
        obs = env.step(AtariAction(action_id=(1, 2, 3)[i % 3]))
        seen.append((obs.frame_bytes, obs.frame_b64, obs.reward, obs.lives, obs.frame_number,
                     obs.episode_frame_number, obs.terminated))  # fmt: skip
    return seen


@pytest.fixture(scope="module")
def pool_server() -> Iterator[str]:
    settings = {"ATARI_GAME": "breakout", "ATARI_EMULATOR_PROCESSES": "2"}
    with running_server(APP, env=settings) as url:
        yield url


def test_processes_setting() -> None:
    assert processes_setting(0) == 0 and processes_setting("3") == 3
    assert 1 <= processes_setting("auto") <= 8
    with pytest.raises(ValueError, match="ATARI_EMULATOR_PROCESSES"):
        processes_setting("many")
    with pytest.raises(ValueError):
        processes_setting(-1)


def test_episodes_match_the_emulator_in_process() -> None:
    """Seeded episodes (the ROM kept, and reloaded for sticky actions), RGB and grayscale,
    played by an emulator in a worker process and in this one: frame for frame the same."""
    here = AtariEnvironment("breakout", frame_format="bytes", emulator_processes=0)
    there = AtariEnvironment("breakout", frame_format="bytes", emulator_processes=1)
    try:
        for reset in (
            {"seed": 3},
            {"seed": 3},  # again: the kept ROM
            {"seed": 4, "repeat_action_probability": 0.25},  # sticky: reloaded with the seed
            {"seed": 5, "obs_type": "grayscale", "frame_format": "zlib", "downscale": 2},
        ):
            assert play(here, **reset) == play(there, **reset)
        assert isinstance(there._ale, RemoteEmulator)
        assert there.state.step_count == here.state.step_count > 0
    finally:
        here.close()
        there.close()


def test_refused_options_and_actions_name_the_field() -> None:
    env = AtariEnvironment("pong", frame_format="bytes", emulator_processes=1)
    try:
        with pytest.raises(InvalidActionError, match="mode") as info:
            env.reset(mode=99)
        assert info.value.data["errors"][0]["loc"] == ["mode"]
        env.reset(seed=0)
        with pytest.raises(InvalidActionError, match="action_id"):
            env.step(AtariAction(action_id=6))
        assert env.step(AtariAction(action_id=0)).frame_bytes
    finally:
        env.close()


def test_a_lost_emulator_process_is_infrastructure_and_reset_recovers() -> None:
    env = AtariEnvironment("pong", frame_format="bytes", emulator_processes=1)
    try:
        env.reset(seed=0)
        emulator = env._ale
        assert isinstance(emulator, RemoteEmulator)
        lost = emulator._worker.process
        lost.kill()
        lost.wait()
        with pytest.raises(ServerError) as info:  # never an episode's outcome
            env.step(AtariAction(action_id=0))
        assert (info.value.category, info.value.code) == ("infrastructure", "SESSION_ERROR")
        obs = env.reset(seed=0)  # a new process
        assert isinstance(env._ale, RemoteEmulator) and env._ale._worker.process is not lost
        assert obs.frame_bytes and env.step(AtariAction(action_id=0)).frame_bytes
    finally:
        env.close()


async def test_async_steps_match_and_a_lost_process_is_infrastructure() -> None:
    """The server's path with emulator processes: steps awaited on the loop, resets on a
    thread (the socket switches between blocking and not)."""
    here = AtariEnvironment("pong", frame_format="bytes", emulator_processes=0)
    there = PooledAtariEnvironment("pong", frame_format="bytes", emulator_processes=1)
    try:
        for seed in (2, 3):
            expected = play(here, steps=40, seed=seed)
            obs = await asyncio.to_thread(there.reset, seed=seed)
            frames = [obs.frame_bytes]
            for i in range(40):
                obs = await there.step_async(AtariAction(action_id=(1, 2, 3)[i % 3]))
                frames.append(obs.frame_bytes)
            assert frames == [seen[0] for seen in expected]
        emulator = there._ale
        assert isinstance(emulator, RemoteEmulator)
        emulator._worker.process.kill()
        with pytest.raises(ServerError) as info:
            await there.step_async(AtariAction(action_id=0))
        assert info.value.category == "infrastructure"
        assert (await asyncio.to_thread(there.reset, seed=0)).frame_bytes
    finally:
        here.close()
        there.close()


def test_closing_the_pool_ends_its_processes() -> None:
    pool = EmulatorPool(2)
    emulators = [pool.create(game="pong") for _ in range(3)]
    processes = [w.process for w in pool._workers]
    assert len(processes) == 2 and all(p.poll() is None for p in processes)
    emulators[0].close()
    pool.close()
    assert all(p.poll() is not None for p in processes)
    with pytest.raises(ServerError):
        emulators[1].step(0)


async def test_served_episodes_match_and_errors_stay_typed(pool_server: str) -> None:
    local = AtariEnvironment("breakout", frame_format="bytes", emulator_processes=0)
    try:
        expected = play(local, steps=60, seed=11)
    finally:
        local.close()
    async with AtariEnv(base_url=pool_server, binary_frames=True) as env:
        result = await env.reset(seed=11)
        frames = [result.observation.frame_bytes]
        for i in range(60):
            result = await env.step(AtariAction(action_id=(1, 2, 3)[i % 3]))
            frames.append(result.observation.frame_bytes)
        assert frames == [seen[0] for seen in expected]
        assert decode_frame(result.observation).shape == (210, 160, 3)
        with pytest.raises(InvalidRequestError) as info:
            await env.reset(mode=99)
        assert info.value.data["errors"][0]["loc"] == ["mode"]
        await env.reset(seed=1)  # the session is still usable
        assert (await env.step(AtariAction(action_id=0))).observation.frame_bytes
