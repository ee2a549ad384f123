"""Typed client of the TextArena environment."""

from __future__ import annotations

from openenv.core import EnvClient

from .models import TextArenaAction, TextArenaObservation, TextArenaState


class TextArenaEnv(EnvClient[TextArenaAction, TextArenaObservation, TextArenaState]):
    """`reset(env_id="Wordle-v0", seed=0)`, then `step(TextArenaAction(message="[crane]"))`.

    Results parse into `TextArenaObservation` (messages as `TextArenaMessage`, OpenEnv's
    `sender_id`/`content`/`category` included) and `state()` into `TextArenaState`."""
