"""Typed client of the Atari environment, and `decode_frame` to get frames as numpy arrays."""

from __future__ import annotations

import base64
import zlib
from typing import Any

import numpy as np

from openenv.core import EnvClient
from openenv.core.client_types import StepResult

from .models import AtariAction, AtariObservation, AtariState

#: The frame format this client asks for when the caller names none: the raw bytes, attached to
#: a binary frame (base64 text when the connection has no binary frames), instead of OpenEnv's
#: flat int list; `obs.screen` still gives that list (decoded on access).
CLIENT_FRAME_FORMAT = "bytes"


def decode_frame(observation: AtariObservation) -> np.ndarray:
    """The observation's frame as a numpy array of `frame_shape` and `frame_dtype`, whatever
    its `frame_format`."""
    dtype = np.dtype(observation.frame_dtype)
    shape = tuple(observation.frame_shape or observation.screen_shape)
    if observation.frame_format == "list":
        if observation.screen_values is None:
            raise ValueError("the observation carries no frame")
        return np.asarray(observation.screen_values, dtype=dtype).reshape(shape)
    if observation.frame_format == "bytes":
        if observation.frame_bytes is None:
            raise ValueError("the observation carries no frame")
        return np.frombuffer(observation.frame_bytes, dtype=dtype).reshape(shape)
    if observation.frame_b64 is None:
        raise ValueError("the observation carries no frame")
    raw = base64.b64decode(observation.frame_b64)
    if observation.frame_format == "zlib":
        raw = zlib.decompress(raw)
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


class AtariEnv(EnvClient[AtariAction, AtariObservation, AtariState]):
    """`reset(game="breakout", seed=0, obs_type="grayscale", frame_format="zlib")`, then
    `step(AtariAction(action_id=1))`; `AtariEnv.decode(obs)` (or `decode_frame(obs)`) gives the
    frame as a numpy array, `obs.screen` the flat list OpenEnv's client gives.

    Unless `reset` names a `frame_format`, this client asks for "bytes" frames (clients that
    name none, such as OpenEnv's, get the "list" form)."""

    decode = staticmethod(decode_frame)

    async def _reset_async(self, **kwargs: Any) -> StepResult[AtariObservation]:
        kwargs.setdefault("frame_format", CLIENT_FRAME_FORMAT)
        return await super()._reset_async(**kwargs)
