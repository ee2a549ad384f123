"""Atari 2600 games through ale-py's Gymnasium environment (ROMs ship with ale-py >= 0.9)."""

from __future__ import annotations

import asyncio
import base64
import os
import zlib
from typing import Any
from uuid import uuid4

import numpy as np
from ale_py import roms
from ale_py.env import AtariEnv as AleAtariEnv

from openenv.core.env_server import Environment, InvalidActionError
from openenv.core.errors import ServerError

from ..models import AtariAction, AtariObservation, AtariState
from .emulators import RemoteEmulator, processes_setting, shared_pool

DEFAULT_GAME = "pong"
OBS_TYPES = ("rgb", "grayscale", "ram")
FRAME_FORMATS = ("bytes", "base64", "zlib", "list")
#: 108,000 frames (30 minutes of play) at the default frame skip of 4, as in the literature
DEFAULT_MAX_EPISODE_STEPS = 27_000
#: OpenEnv's atari_env server settings, read when an environment is built without them
ENV_VARS = {
    "game": "ATARI_GAME",
    "obs_type": "ATARI_OBS_TYPE",
    "full_action_space": "ATARI_FULL_ACTION_SPACE",
    "mode": "ATARI_MODE",
    "difficulty": "ATARI_DIFFICULTY",
    "repeat_action_probability": "ATARI_REPEAT_ACTION_PROB",
    "frameskip": "ATARI_FRAMESKIP",
}


def _from_environ(option: str) -> Any:
    """The value of `option`'s ATARI_* variable (None when unset or blank), typed."""
    name = ENV_VARS[option]
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        if option == "full_action_space":
            return raw.lower() in ("1", "true", "yes", "on")
        if option in ("mode", "difficulty", "frameskip"):
            return int(raw)
        if option == "repeat_action_probability":
            return float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number") from None
    return raw


def _invalid(field: str, message: str) -> InvalidActionError:
    return InvalidActionError(
        message, errors=[{"loc": [field], "msg": message, "type": "value_error"}]
    )


def game_ids() -> list[str]:
    """The games whose ROMs ship with ale-py, e.g. "pong", "breakout", "space_invaders"."""
    return sorted(roms.get_all_rom_ids())


def downscale_frame(frame: np.ndarray, factor: int) -> np.ndarray:
    """Average `factor` x `factor` blocks (the edge rows/columns that do not fill a block are
    dropped); 1 returns the frame as it is."""
    if factor == 1:
        return frame
    h, w = frame.shape[0] // factor, frame.shape[1] // factor
    cropped = frame[: h * factor, : w * factor].astype(np.float32)
    blocks = cropped.reshape(h, factor, w, factor, *frame.shape[2:])
    return np.rint(blocks.mean(axis=(1, 3))).astype(np.uint8)


def frame_bytes(frame: np.ndarray) -> bytes:
    """The frame's bytes (C order): the bytes object it is a view of when it is one (a frame
    from an emulator process), else a copy."""
    owner = frame.base
    while isinstance(owner, np.ndarray):
        owner = owner.base
    if isinstance(owner, bytes) and frame.flags.c_contiguous and frame.nbytes == len(owner):
        return owner
    return frame.tobytes()


def encode_frame(frame: np.ndarray, frame_format: str) -> dict[str, Any]:
    """The observation fields of a frame in `frame_format`."""
    frame = np.ascontiguousarray(frame, dtype=np.uint8)
    fields: dict[str, Any] = {
        "frame_format": frame_format,
        "frame_shape": list(frame.shape),
        "screen_shape": list(frame.shape),
        "frame_dtype": str(frame.dtype),
    }
    if frame_format == "list":
        fields["screen"] = frame.reshape(-1).tolist()
    elif frame_format == "bytes":
        fields["frame_bytes"] = frame_bytes(frame)
    else:
        raw = frame_bytes(frame)
        if frame_format == "zlib":
            raw = zlib.compress(raw, 6)
        fields["frame_b64"] = base64.b64encode(raw).decode("ascii")
    return fields


class AtariEnvironment(Environment[AtariAction, AtariObservation, AtariState]):
    """One Atari game per episode (`ATARI_GAME`, default "pong", or `reset(game=...)`).

    Each step repeats the action for `frameskip` frames (with sticky actions: the previous action
    is repeated instead with `repeat_action_probability` each frame) and returns the summed ALE
    reward. The episode ends when the game is over (`terminated`) or after `max_episode_steps`
    steps (`truncated`). Settings not passed come from OpenEnv's `ATARI_*` variables, then
    OpenEnv's defaults (pong, rgb, minimal action set, frameskip 4, no sticky actions)."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    #: Frames a step may emulate and still run on the server's event loop (`step_async`).
    ON_LOOP_MAX_FRAMESKIP = 8

    def __init__(
        self,
        game_name: str | None = None,
        obs_type: str | None = None,
        full_action_space: bool | None = None,
        mode: int | None = None,
        difficulty: int | None = None,
        repeat_action_probability: float | None = None,
        frameskip: int | None = None,
        downscale: int = 1,
        frame_format: str = "list",
        max_episode_steps: int | None = DEFAULT_MAX_EPISODE_STEPS,
        game: str | None = None,
        emulator_processes: int | str | None = None,
    ) -> None:
        super().__init__()
        given = {
            "game": game_name or game,
            "obs_type": obs_type,
            "full_action_space": full_action_space,
            "mode": mode,
            "difficulty": difficulty,
            "repeat_action_probability": repeat_action_probability,
            "frameskip": frameskip,
        }
        fallback = {
            "game": DEFAULT_GAME,
            "obs_type": "rgb",
            "full_action_space": False,
            "repeat_action_probability": 0.0,
            "frameskip": 4,
        }
        self._defaults: dict[str, Any] = {
            "downscale": downscale,
            "frame_format": frame_format,
            "max_episode_steps": max_episode_steps,
        }
        for option, value in given.items():
            if value is None:
                value = _from_environ(option)
            self._defaults[option] = fallback.get(option) if value is None else value
        #: > 0: the emulator runs in the server's shared pool of that many worker processes
        self._processes = processes_setting(emulator_processes)
        self._ale: AleAtariEnv | RemoteEmulator | None = None
        self._ale_key: tuple | None = None
        #: the emulator's frame count at the last seeded reset that kept the loaded ROM
        self._frame_base = 0
        self._meanings: list[str] = []
        self._state = AtariState(episode_id=str(uuid4()))

    # -- helpers --------------------------------------------------------------------------

    def _make(self, st: AtariState) -> AleAtariEnv | RemoteEmulator:
        key = (st.game, st.obs_type, st.frameskip, st.repeat_action_probability,
               st.full_action_space, st.mode, st.difficulty)  # fmt: skip
        if self._ale is None or self._ale_key != key or not getattr(self._ale, "alive", True):
            self.close()
            options = {
                "game": st.game,
                "mode": st.mode,
                "difficulty": st.difficulty,
                "obs_type": st.obs_type,
                "frameskip": st.frameskip,
                "repeat_action_probability": st.repeat_action_probability,
                "full_action_space": st.full_action_space,
            }
            try:
                if self._processes:
                    self._ale = shared_pool(self._processes).create(**options)
                else:
                    self._ale = AleAtariEnv(**options)
            except ServerError:
                raise  # the emulator process is gone: not the caller's options
            except Exception as exc:  # ale-py names the unsupported mode/difficulty
                field = "difficulty" if "ifficult" in str(exc) else "mode"
                raise _invalid(field, f"{st.game}: {exc}") from None
            self._ale_key = key
            self._meanings = list(self._ale.get_action_meanings())
        return self._ale

    def _observe(
        self, frame: np.ndarray, info: dict, reward: float, message: str = ""
    ) -> AtariObservation:
        st = self._state
        st.lives = int(info.get("lives", 0))
        done = st.terminated or st.truncated
        return AtariObservation(
            game=st.game,
            **encode_frame(downscale_frame(frame, st.downscale), st.frame_format),
            legal_actions=list(range(len(self._meanings))),
            action_meanings=list(self._meanings),
            lives=st.lives,
            terminated=st.terminated,
            truncated=st.truncated,
            episode_frame_number=int(info.get("episode_frame_number", 0)),
            frame_number=int(info.get("frame_number", 0)) - self._frame_base,
            message=message,
            done=done,
            reward=reward,
        )

    # -- the API --------------------------------------------------------------------------

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        game: str | None = None,
        obs_type: str | None = None,
        frameskip: int | None = None,
        repeat_action_probability: float | None = None,
        downscale: int | None = None,
        full_action_space: bool | None = None,
        frame_format: str | None = None,
        max_episode_steps: int | None = None,
        game_name: str | None = None,
        mode: int | None = None,
        difficulty: int | None = None,
        **kwargs: Any,
    ) -> AtariObservation:
        given = {
            "game": game or game_name,
            "obs_type": obs_type,
            "frameskip": frameskip,
            "repeat_action_probability": repeat_action_probability,
            "downscale": downscale,
            "full_action_space": full_action_space,
            "frame_format": frame_format,
            "max_episode_steps": max_episode_steps,
            "mode": mode,
            "difficulty": difficulty,
        }
        o = {k: self._defaults[k] if v is None else v for k, v in given.items()}
        o["game"] = str(o["game"]).strip().lower()
        if o["game"] not in roms.get_all_rom_ids():
            raise _invalid("game", f"unknown Atari game {o['game']!r}; e.g. pong, breakout")
        if o["obs_type"] not in OBS_TYPES:
            raise _invalid(
                "obs_type", f"obs_type must be one of {OBS_TYPES}, not {o['obs_type']!r}"
            )
        if o["frame_format"] not in FRAME_FORMATS:
            raise _invalid(
                "frame_format",
                f"frame_format must be one of {FRAME_FORMATS}, not {o['frame_format']!r}",
            )
        if int(o["frameskip"]) < 1:
            raise _invalid("frameskip", "frameskip must be at least 1")
        if not 0.0 <= float(o["repeat_action_probability"]) <= 1.0:
            raise _invalid(
                "repeat_action_probability", "repeat_action_probability must be in [0, 1]"
            )
        if int(o["downscale"]) < 1:
            raise _invalid("downscale", "downscale must be a positive integer factor")
        if o["obs_type"] == "ram" and int(o["downscale"]) != 1:
            raise _invalid("downscale", "RAM observations cannot be downscaled")
        if o["max_episode_steps"] is not None and int(o["max_episode_steps"]) < 0:
            raise _invalid("max_episode_steps", "max_episode_steps must be positive (0: no limit)")
        if o["max_episode_steps"] == 0:
            o["max_episode_steps"] = None
        self._state = AtariState(
            episode_id=episode_id or str(uuid4()),
            game=o["game"],
            game_name=o["game"],
            seed=seed,
            obs_type=o["obs_type"],
            frameskip=int(o["frameskip"]),
            repeat_action_probability=float(o["repeat_action_probability"]),
            downscale=int(o["downscale"]),
            full_action_space=bool(o["full_action_space"]),
            mode=None if o["mode"] is None else int(o["mode"]),
            difficulty=None if o["difficulty"] is None else int(o["difficulty"]),
            frame_format=o["frame_format"],
            max_episode_steps=None
            if o["max_episode_steps"] is None
            else int(o["max_episode_steps"]),
        )
        previous = self._ale
        ale = self._make(self._state)
        if seed is not None and self._state.repeat_action_probability == 0.0:
            # ale-py reloads the ROM on every seeded reset (~80 ms) only to re-seed the ALE's
            # own RNG, which nothing reads without sticky actions: the episode is the same.
            ale.seed_game(seed)  # still seeds the numpy generator ale-py samples from
            frame, info = ale.reset()
            # frame_number counts from the last ROM load: report it as if it had happened
            self._frame_base = int(info.get("frame_number", 0)) - int(
                info.get("episode_frame_number", 0)
            )
        else:
            frame, info = ale.reset(seed=seed)
            if seed is not None or ale is not previous:
                self._frame_base = 0
        return self._observe(frame, info, 0.0, f"{o['game']}: {len(self._meanings)} actions")

    def step(
        self, action: AtariAction, timeout_s: float | None = None, **kwargs: Any
    ) -> AtariObservation:
        emulator = self._check_step(action)
        frame, reward, terminated, _, info = emulator.step(action.action_id)
        return self._stepped(frame, reward, terminated, info)

    async def step_async(
        self, action: AtariAction, timeout_s: float | None = None, **kwargs: Any
    ) -> AtariObservation:
        """The step, on the server's event loop when it is quick (frameskip at most
        `ON_LOOP_MAX_FRAMESKIP`: a few hundred microseconds). The emulation holds the GIL on
        any thread, so a worker thread only adds the hand-over and a GIL ping-pong with the
        loop: served at 16 sessions, about 15% more steps/s this way (bench/README.md). A
        longer step, or a reset (which may load a ROM, ~80 ms), runs on a worker thread."""
        if self._state.frameskip <= self.ON_LOOP_MAX_FRAMESKIP:
            return self.step(action, timeout_s, **kwargs)
        return await asyncio.to_thread(self.step, action, timeout_s, **kwargs)

    def _check_step(self, action: AtariAction) -> AleAtariEnv | RemoteEmulator:
        st = self._state
        if self._ale is None or st.terminated or st.truncated:
            raise ValueError("The episode is over (or was never started): call reset()")
        n = len(self._meanings)
        if not 0 <= action.action_id < n:
            raise _invalid(
                "action_id",
                f"action_id {action.action_id} is out of range: {st.game} has actions 0..{n - 1} "
                f"({', '.join(self._meanings)})",
            )
        return self._ale

    def _stepped(
        self, frame: np.ndarray, reward: float, terminated: bool, info: dict
    ) -> AtariObservation:
        st = self._state
        st.step_count += 1
        st.episode_return += float(reward)
        st.terminated = bool(terminated)
        st.truncated = (
            not st.terminated
            and st.max_episode_steps is not None
            and st.step_count >= st.max_episode_steps
        )
        return self._observe(frame, info, float(reward))

    @property
    def state(self) -> AtariState:
        return self._state

    def close(self) -> None:
        if self._ale is not None:
            ale, self._ale, self._ale_key = self._ale, None, None
            ale.close()


class PooledAtariEnvironment(AtariEnvironment):
    """`AtariEnvironment` as served with emulator processes: a step awaits its emulator's
    socket on the event loop instead of holding a worker thread across the round trip (a
    blocked thread per session, and a GIL hand-over per system call, cost the server more
    than the round trip itself). Resets still run on a worker thread (one may start a
    process)."""

    async def step_async(
        self, action: AtariAction, timeout_s: float | None = None, **kwargs: Any
    ) -> AtariObservation:
        emulator = self._check_step(action)
        if not isinstance(emulator, RemoteEmulator):
            return self.step(action)
        frame, reward, terminated, _, info = await emulator.step_async(action.action_id)
        return self._stepped(frame, reward, terminated, info)
