"""Typed models of the Atari environment: OpenEnv's atari_env fields plus compact frames."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, PrivateAttr

from openenv.core.env_server.types import Action, Observation, State, WireBytes

ObsType = Literal["rgb", "grayscale", "ram"]
FrameFormat = Literal["bytes", "base64", "zlib", "list"]


class AtariAction(Action):
    """An index into `observation.legal_actions` / `action_meanings` (0 is always NOOP).

    `game_name`, `obs_type` and `full_action_space` are OpenEnv's action fields: accepted so
    OpenEnv's clients work, and (as in OpenEnv) not used; the game is the server's or reset's."""

    action_id: int
    game_name: str = "pong"
    obs_type: ObsType = "rgb"
    full_action_space: bool = False


class AtariObservation(Observation):
    """One frame of the game.

    `frame_format` "list" (the default, OpenEnv's form) carries the frame as `screen`, a flat
    list of ints; "base64" / "zlib" carry it in `frame_b64` only (a fraction of the JSON);
    "bytes" carries the raw bytes in `frame_bytes`, which travel as a binary attachment to a
    client that negotiated binary frames (base64 text in JSON otherwise). `screen` is decoded
    from the compact forms on first access, so OpenEnv code reading
    `np.array(obs.screen).reshape(obs.screen_shape)` works with every format."""

    model_config = ConfigDict(
        extra="forbid",
        validate_assignment=True,
        arbitrary_types_allowed=True,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
    )

    #: the flat frame as sent on the wire (None in the base64 formats); read `screen`
    screen_values: list[int] | None = Field(default=None, alias="screen")
    #: the frame's shape: (210, 160, 3) RGB, (210, 160) grayscale, (128,) RAM
    screen_shape: list[int] = []
    legal_actions: list[int] = []
    lives: int = 0
    episode_frame_number: int = 0
    #: frames emulated since the server's emulator was created
    frame_number: int = 0
    #: OpenEnv's optional PNG preview; never filled here (PNG encoding costs every step)
    screen_image: str | None = None
    game: str = ""
    #: "list": `screen` holds the flat frame; "base64": `frame_b64` holds base64 of the raw
    #: bytes (C order); "zlib": the same bytes zlib-compressed before base64
    frame_format: FrameFormat = "list"
    frame_b64: str | None = None
    #: "bytes": the raw frame (C order)
    frame_bytes: WireBytes | None = None
    #: the same as `screen_shape`
    frame_shape: list[int] = []
    frame_dtype: str = "uint8"
    #: what each action id does ("NOOP", "FIRE", ...)
    action_meanings: list[str] = []
    #: the game is over
    terminated: bool = False
    #: the episode was cut at max_episode_steps
    truncated: bool = False
    message: str = ""

    _decoded: list[int] | None = PrivateAttr(default=None)

    @property
    def screen(self) -> list[int]:
        """The frame as a flat list of ints (OpenEnv's field), whatever `frame_format`."""
        if self.screen_values is not None:
            return self.screen_values
        if self._decoded is None:
            from .client import decode_frame

            self._decoded = decode_frame(self).reshape(-1).tolist()
        return self._decoded

    def __repr_args__(self) -> Any:
        hidden = ("screen_values", "frame_bytes")
        return [(k, v) for k, v in super().__repr_args__() if k not in hidden]


class AtariState(State):
    """OpenEnv's state fields (`game_name`, `obs_type`, `full_action_space`, `mode`,
    `difficulty`, `repeat_action_probability`, `frameskip`) and this environment's own."""

    game_name: str = "pong"
    obs_type: ObsType = "rgb"
    full_action_space: bool = False
    mode: int | None = None
    difficulty: int | None = None
    repeat_action_probability: float = 0.0
    frameskip: int = 4
    game: str = ""
    seed: int | None = None
    downscale: int = 1
    frame_format: FrameFormat = "list"
    max_episode_steps: int | None = None
    episode_return: float = 0.0
    lives: int = 0
    terminated: bool = False
    truncated: bool = False
