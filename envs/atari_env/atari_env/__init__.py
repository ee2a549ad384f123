"""Atari environment: Atari 2600 games from the Arcade Learning Environment (ale-py)."""

from .client import AtariEnv, decode_frame
from .models import AtariAction, AtariObservation, AtariState

__all__ = ["AtariAction", "AtariEnv", "AtariObservation", "AtariState", "decode_frame"]
