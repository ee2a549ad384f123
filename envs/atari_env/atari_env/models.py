"""Typed models of the Atari environment."""

from __future__ import annotations

from typing import Any, Literal

from openenv.core.env_server.types import Action, Observation, State

ObsType = Literal["rgb", "grayscale"]
FrameFormat = Literal["base64", "zlib", "list"]


class AtariAction(Action):
    """An index into `observation.legal_actions` / `action_meanings` (0 is always NOOP)."""

    action_id: int


class AtariObservation(Observation):
    game: str = ""
    #: "base64": `frame_b64` holds base64 of the raw bytes (C order); "zlib": the same bytes
    #: zlib-compressed before base64; "list": `frame` holds nested JSON lists
    frame_format: FrameFormat = "base64"
    frame_b64: str | None = None
    frame: Any = None
    #: (height, width) for grayscale, (height, width, 3) for RGB
    frame_shape: list[int] = []
    frame_dtype: str = "uint8"
    #: the action ids the agent may play (0..n-1) and what each does ("NOOP", "FIRE", ...)
    legal_actions: list[int] = []
    action_meanings: list[str] = []
    lives: int = 0
    #: the game is over
    terminated: bool = False
    #: the episode was cut at max_episode_steps
    truncated: bool = False
    episode_frame_number: int = 0
    message: str = ""


class AtariState(State):
    game: str = ""
    seed: int | None = None
    obs_type: ObsType = "rgb"
    frameskip: int = 4
    repeat_action_probability: float = 0.25
    downscale: int = 1
    full_action_space: bool = False
    frame_format: FrameFormat = "base64"
    max_episode_steps: int | None = None
    episode_return: float = 0.0
    lives: int = 0
    terminated: bool = False
    truncated: bool = False
