"""Atari over the wire: Pong and Breakout episodes, frame encodings, seeding, invalid actions."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from websockets.asyncio.client import connect

from atari_env import AtariAction, AtariEnv, AtariObservation, decode_frame
from atari_env.server.atari_environment import AtariEnvironment, downscale_frame
from openenv.core.errors import InvalidActionError, InvalidRequestError
from openenv.core.protocol import (
    BINARY_MAGIC,
    BINARY_SUBPROTOCOL,
    RESUME_TOKEN_HEADER,
    SUBPROTOCOL,
    decode_reply,
)
from openenv.testing import check_env, running_server

APP = "atari_env.server.app:app"


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with running_server(APP) as url:
        yield url


@pytest.fixture(scope="module")
def breakout_server() -> Iterator[str]:
    with running_server(APP, env={"ATARI_GAME": "breakout"}) as url:
        yield url


def test_passes_the_environment_checker() -> None:
    samples = [AtariAction(action_id=a) for a in (0, 1, 2, 3)]
    # base64 frames: the checker validates every observation against the schema, and a
    # 100,800-int list (the default, OpenEnv's form) makes that slow
    report = check_env(lambda: AtariEnvironment(frame_format="base64"), sample_actions=samples)
    assert report.ok, str(report)


def test_passes_the_environment_checker_until_game_over() -> None:
    # Breakout without firing after a life is lost ends quickly only with FIRE; cut it instead.
    samples = [AtariAction(action_id=1), AtariAction(action_id=2)]
    report = check_env(
        lambda: AtariEnvironment("breakout", frame_format="zlib", max_episode_steps=20),
        sample_actions=samples,
        steps=30,
    )
    assert report.ok, str(report)
    assert "step_after_done" in str(report)


def test_downscale_averages_blocks() -> None:
    frame = np.arange(5 * 4, dtype=np.uint8).reshape(5, 4)
    small = downscale_frame(frame, 2)
    assert small.shape == (2, 2) and small[0, 0] == round((0 + 1 + 4 + 5) / 4)
    rgb = np.zeros((210, 160, 3), dtype=np.uint8)
    assert downscale_frame(rgb, 2).shape == (105, 80, 3)


async def test_pong_frames_decode(server: str) -> None:
    async with AtariEnv(base_url=server) as env:
        result = await env.reset(seed=0)
        obs = result.observation
        # this client asks for raw-bytes frames when the caller names no format
        assert obs.game == "pong" and result.reward == 0.0 and not result.done
        assert obs.frame_format == "bytes" and obs.screen_values is None
        assert obs.action_meanings[:2] == ["NOOP", "FIRE"]
        assert obs.legal_actions == list(range(len(obs.action_meanings)))
        frame = decode_frame(obs)
        assert frame.shape == (210, 160, 3) and frame.dtype == np.uint8 and frame.any()
        assert np.array_equal(AtariEnv.decode(obs), frame)

        result = await env.reset(seed=0, obs_type="grayscale", frame_format="zlib", downscale=2)
        small = decode_frame(result.observation)
        assert small.shape == (105, 80) and result.observation.frame_shape == [105, 80]
        assert len(result.observation.frame_b64) < 5000  # compressed

        result = await env.reset(seed=0, frame_format="list")  # OpenEnv's flat int list
        listed = decode_frame(result.observation)
        assert result.observation.frame_b64 is None
        flat = result.observation.screen_values
        assert isinstance(flat, list) and len(flat) == 210 * 160 * 3
        assert result.observation.screen is flat
        assert result.observation.screen_shape == [210, 160, 3]
        assert np.array_equal(listed, frame)
        assert obs.screen == flat  # decoded from the raw bytes on access
        result = await env.reset(seed=0, frame_format="base64")
        assert np.array_equal(decode_frame(result.observation), frame)

        result = await env.reset(seed=0, obs_type="ram", frame_format="zlib")
        assert result.observation.screen_shape == [128] and len(result.observation.screen) == 128


async def test_frames_travel_raw_in_binary_frames_and_as_text_without(server: str) -> None:
    """Our client negotiates binary frames: the frame's bytes come attached, not as text; a
    client that does not gets the same frame as base64 text in JSON, read back as bytes."""
    async with (
        AtariEnv(base_url=server) as binary,
        AtariEnv(base_url=server, binary_frames=False) as text,
    ):
        assert binary._ws is not None and binary._ws.subprotocol == BINARY_SUBPROTOCOL
        assert text._ws is not None and text._ws.subprotocol == SUBPROTOCOL
        seen: dict[str, list] = {"binary": [], "text": []}
        for name, env in (("binary", binary), ("text", text)):
            result = await env.reset(seed=0)
            for action in (2, 3, 2, 0):
                obs = result.observation
                assert obs.frame_format == "bytes" and isinstance(obs.frame_bytes, bytes)
                assert len(obs.frame_bytes) == 210 * 160 * 3
                seen[name].append(decode_frame(obs))
                result = await env.step(AtariAction(action_id=action))
            assert (await env.state()).step_count == 4  # the state stays a text frame
        for got, want in zip(seen["binary"], seen["text"], strict=True):
            assert np.array_equal(got, want)
        listed = await text.reset(seed=0, frame_format="list")
        assert listed.observation.screen == seen["binary"][0].reshape(-1).tolist()
        with pytest.raises(InvalidRequestError):  # errors stay text frames, the session lives
            await binary.step(AtariAction(action_id=99))
        assert len((await binary.step(AtariAction(action_id=0))).observation.screen) == 100_800


async def test_raw_binary_frame_on_the_wire(server: str) -> None:
    """The frame as bytes on the wire: a client offering `openenv.v1.bin` gets one binary
    WebSocket frame per observation, its header small and the frame attached."""
    url = server.replace("http://", "ws://") + "/ws"
    async with connect(url, subprotocols=[BINARY_SUBPROTOCOL], compression=None) as ws:
        assert ws.subprotocol == BINARY_SUBPROTOCOL
        assert decode_reply(await ws.recv()).kind == "session"
        await ws.send(json.dumps({"type": "reset", "data": {"frame_format": "bytes"}, "id": 1}))
        raw = await ws.recv()
        assert isinstance(raw, bytes) and raw.startswith(BINARY_MAGIC)
        assert len(raw) < 100_800 + 2_000  # the JSON header is small
        reply = decode_reply(raw)
        assert reply.id == 1 and len(reply.data["observation"]["frame_bytes"]) == 100_800
        await ws.send(json.dumps({"type": "step", "data": {"action_id": 0}, "id": 1}))
        assert await ws.recv() == raw  # a re-sent id: the stored reply, binary again


async def test_a_binary_reply_resent_to_a_json_connection_comes_as_json(server: str) -> None:
    """A reply kept from a binary connection, asked for again after a resume over a connection
    that offers no binary frames, is re-encoded: a JSON text frame with the frame inline."""
    url = server.replace("http://", "ws://") + "/ws"
    async with connect(url, subprotocols=[BINARY_SUBPROTOCOL], compression=None) as first:
        session = decode_reply(await first.recv()).data
        await first.send(json.dumps({"type": "reset", "data": {"frame_format": "bytes"}}))
        await first.recv()
        await first.send(json.dumps({"type": "step", "data": {"action_id": 0}, "id": "s1"}))
        raw = await first.recv()
        assert isinstance(raw, bytes)
        frame = decode_reply(raw).data["observation"]["frame_bytes"]
        first.transport.abort()  # the connection is lost, the session waits to be resumed
    resume = f"{url}?session_id={session['session_id']}"
    headers = {RESUME_TOKEN_HEADER: session["resume_token"]}
    async with connect(resume, additional_headers=headers, compression=None) as again:
        assert decode_reply(await again.recv()).data["resumed"] is True
        await again.send(json.dumps({"type": "step", "data": {"action_id": 0}, "id": "s1"}))
        text = await again.recv()
        assert isinstance(text, str)
        reply = decode_reply(text)
        assert reply.id == "s1"
        observation = AtariObservation.model_validate(reply.data["observation"])
        assert decode_frame(observation).tobytes() == frame
        await again.send(json.dumps({"type": "state"}))
        assert json.loads(await again.recv())["data"]["step_count"] == 1  # applied once


async def test_pong_episode_pays_points(server: str) -> None:
    async with AtariEnv(base_url=server) as env:
        await env.reset(seed=1, obs_type="grayscale", frame_format="zlib", max_episode_steps=400)
        rewards = []
        for i in range(400):
            result = await env.step(AtariAction(action_id=(0, 2, 3)[i % 3]))
            rewards.append(result.reward)
            if result.done:
                break
        assert result.done and result.observation.truncated and not result.observation.terminated
        assert -1.0 in rewards  # the built-in player scores against a jittery paddle
        assert set(rewards) <= {-1.0, 0.0, 1.0}
        state = await env.state()
        assert state.step_count == 400 and state.episode_return == pytest.approx(sum(rewards))
        with pytest.raises(Exception, match="call reset"):
            await env.step(AtariAction(action_id=0))


async def test_breakout_to_game_over(breakout_server: str) -> None:
    async with AtariEnv(base_url=breakout_server) as env:
        result = await env.reset(seed=3, obs_type="grayscale", frame_format="zlib")
        obs = result.observation
        assert obs.game == "breakout" and obs.lives == 5
        assert obs.action_meanings == ["NOOP", "FIRE", "RIGHT", "LEFT"]
        lives, total, steps = [obs.lives], 0.0, 0
        while not result.done:
            result = await env.step(AtariAction(action_id=(1, 2, 3, 3, 2)[steps % 5]))
            total += result.reward
            lives.append(result.observation.lives)
            steps += 1
            assert steps < 5000
        assert result.observation.terminated and result.observation.lives == 0
        assert lives == sorted(lives, reverse=True) and 4 in lives
        assert decode_frame(result.observation).shape == (210, 160)
        assert (await env.state()).episode_return == pytest.approx(total)


async def test_seeded_resets_are_deterministic(breakout_server: str) -> None:
    async def run(seed: int) -> tuple[list[str], list[float]]:
        result = await env.reset(seed=seed, frame_format="zlib", repeat_action_probability=0.25)
        frames, rewards = [result.observation.frame_b64], []
        for i in range(150):
            result = await env.step(AtariAction(action_id=(1, 2, 3)[i % 3]))
            frames.append(result.observation.frame_b64)
            rewards.append(result.reward)
        return frames, rewards

    async with AtariEnv(base_url=breakout_server) as env:
        first, again = await run(7), await run(7)
        assert first == again
        other = await run(8)
        assert other[0] != first[0]


async def test_quick_steps_run_on_the_loop_and_long_ones_on_a_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The server awaits `step_async`: a step of a few frames runs right there, on the loop's
    thread (a worker would only add a hand-over: the emulation holds the GIL anyway), a step
    of many frames on a worker thread; both are the same step."""
    threads: list[int] = []
    real_step = AtariEnvironment.step

    def step(self: AtariEnvironment, *args: Any, **kwargs: Any) -> Any:
        threads.append(threading.get_ident())
        return real_step(self, *args, **kwargs)

    monkeypatch.setattr(AtariEnvironment, "step", step)
    for frameskip, on_loop in ((4, True), (AtariEnvironment.ON_LOOP_MAX_FRAMESKIP + 1, False)):
        served, plain = (AtariEnvironment("pong", frame_format="bytes") for _ in range(2))
        served.reset(seed=3, frameskip=frameskip)
        plain.reset(seed=3, frameskip=frameskip)
        for i in range(5):
            action = AtariAction(action_id=i % 3)
            got = await served.step_async(action)
            assert (threads[-1] == threading.get_ident()) is on_loop
            assert got == plain.step(action)
        served.close()
        plain.close()


def test_seeded_reset_without_sticky_actions_skips_the_rom_reload() -> None:
    """Without sticky actions a seeded reset reuses the loaded ROM (ale-py would reload it) and
    plays exactly the episode a freshly built emulator plays."""

    def episode(env: AtariEnvironment, seed: int) -> list[tuple[str | None, int, int]]:
        obs = env.reset(seed=seed)
        seen = [(obs.frame_b64, obs.frame_number, obs.episode_frame_number)]
        for i in range(60):
            obs = env.step(AtariAction(action_id=(1, 2, 3)[i % 3]))
            seen.append((obs.frame_b64, obs.frame_number, obs.episode_frame_number))
        return seen

    used = AtariEnvironment("breakout", frame_format="zlib")
    episode(used, 1)
    emulator = used._ale
    assert emulator is not None
    loads = 0
    real_load = emulator.load_game

    def counting_load() -> None:
        nonlocal loads
        loads += 1
        real_load()

    emulator.load_game = counting_load  # type: ignore[method-assign]
    again = episode(used, 5)
    assert loads == 0 and used._ale is emulator
    fresh = AtariEnvironment("breakout", frame_format="zlib")
    assert again == episode(fresh, 5)
    used.reset(seed=5, repeat_action_probability=0.25)  # sticky: the seed needs the reload
    assert used._ale is not emulator


async def test_invalid_actions_and_options(server: str) -> None:
    async with AtariEnv(base_url=server) as env:
        await env.reset(seed=0)
        for bad in (6, -1):
            with pytest.raises(InvalidRequestError) as info:
                await env.step(AtariAction(action_id=bad))
            assert info.value.code == "VALIDATION_ERROR" and "action_id" in info.value.message
            assert info.value.data["errors"][0]["loc"] == ["action_id"]
        ok = await env.step(AtariAction(action_id=0))
        assert not ok.done and (await env.state()).step_count == 1
        for options in (
            {"game": "no_such_game"},
            {"obs_type": "pixels"},
            {"frame_format": "png"},
            {"max_episode_steps": -1},
            {"mode": 99},
            {"difficulty": 99},
            {"obs_type": "ram", "downscale": 2},
        ):
            with pytest.raises(InvalidRequestError) as info:
                await env.reset(**options)
            assert info.value.data["errors"][0]["loc"] == [list(options)[-1]]
        await env.reset(max_episode_steps=0)  # no limit, as in OpenEnv
        assert (await env.state()).max_episode_steps is None


def test_openenv_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """OpenEnv's ATARI_* variables set the defaults; arguments and reset options win."""
    for name, value in {
        "ATARI_GAME": "breakout",
        "ATARI_OBS_TYPE": "grayscale",
        "ATARI_FULL_ACTION_SPACE": "true",
        "ATARI_MODE": "4",
        "ATARI_DIFFICULTY": "1",
        "ATARI_REPEAT_ACTION_PROB": "0.25",
        "ATARI_FRAMESKIP": "2",
    }.items():
        monkeypatch.setenv(name, value)
    env = AtariEnvironment(frame_format="zlib")
    obs = env.reset(seed=0)
    state = env.state
    assert (state.game_name, state.obs_type, state.full_action_space) == (
        "breakout",
        "grayscale",
        True,
    )
    assert (state.mode, state.difficulty, state.repeat_action_probability) == (4, 1, 0.25)
    assert obs.screen_shape == [210, 160] and len(obs.legal_actions) == 18
    frames = env.step(AtariAction(action_id=0)).episode_frame_number - obs.episode_frame_number
    assert frames == 2  # ATARI_FRAMESKIP
    env.reset(game_name="pong", mode=0, difficulty=0, frameskip=4)
    assert (env.state.game_name, env.state.mode, env.state.frameskip) == ("pong", 0, 4)
    with pytest.raises(InvalidActionError, match="mode"):  # breakout's mode 4 is not pong's
        AtariEnvironment("pong").reset()
    monkeypatch.delenv("ATARI_MODE")
    monkeypatch.delenv("ATARI_DIFFICULTY")
    assert AtariEnvironment("pong", obs_type="rgb").reset().screen_shape == [210, 160, 3]
    monkeypatch.setenv("ATARI_FRAMESKIP", "four")
    with pytest.raises(ValueError, match="ATARI_FRAMESKIP"):
        AtariEnvironment()
