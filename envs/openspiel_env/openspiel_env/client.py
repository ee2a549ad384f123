"""Typed client of the OpenSpiel environment."""

from __future__ import annotations

from openenv.core import EnvClient

from .models import OpenSpielAction, OpenSpielObservation, OpenSpielState


class OpenSpielEnv(EnvClient[OpenSpielAction, OpenSpielObservation, OpenSpielState]):
    """`reset()` (the server's game) or `reset(game="connect_four", opponent="random", seed=0)`,
    then `step(OpenSpielAction(action_id=3))` with an id from `observation.legal_actions`.

    Results parse into `OpenSpielObservation` / `OpenSpielState`, OpenEnv's fields included."""
