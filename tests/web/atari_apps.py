"""An Atari app for the playground tests, apart from apps.py so other tests do not import ale-py."""

from __future__ import annotations

from atari_env import AtariAction, AtariObservation
from atari_env.server.atari_environment import AtariEnvironment
from openenv.core.env_server import create_app


def _raw_bytes_frames() -> AtariEnvironment:
    return AtariEnvironment(frame_format="bytes")


#: Atari serving raw-bytes frames by default: the page (no binary frames) gets base64 text.
atari_bytes = create_app(_raw_bytes_frames, AtariAction, AtariObservation, env_name="atari_env")
