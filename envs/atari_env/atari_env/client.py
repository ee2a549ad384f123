"""Typed client of the Atari environment, and `decode_frame` to get frames as numpy arrays."""

from __future__ import annotations

import base64
import zlib

import numpy as np

from openenv.core import EnvClient

from .models import AtariAction, AtariObservation, AtariState


def decode_frame(observation: AtariObservation) -> np.ndarray:
    """The observation's frame as a numpy array of `frame_shape` and `frame_dtype`, whatever
    its `frame_format`."""
    dtype = np.dtype(observation.frame_dtype)
    shape = tuple(observation.frame_shape)
    if observation.frame_format == "list":
        if observation.frame is None:
            raise ValueError("the observation carries no frame")
        return np.asarray(observation.frame, dtype=dtype).reshape(shape)
    if observation.frame_b64 is None:
        raise ValueError("the observation carries no frame")
    raw = base64.b64decode(observation.frame_b64)
    if observation.frame_format == "zlib":
        raw = zlib.decompress(raw)
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


class AtariEnv(EnvClient[AtariAction, AtariObservation, AtariState]):
    """`reset(game="breakout", seed=0, obs_type="grayscale", frame_format="zlib")`, then
    `step(AtariAction(action_id=1))`; `AtariEnv.decode(obs)` (or `decode_frame(obs)`) gives the
    frame as a numpy array."""

    decode = staticmethod(decode_frame)
