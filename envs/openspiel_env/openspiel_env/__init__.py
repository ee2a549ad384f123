"""OpenSpiel environment: play OpenSpiel games as player 0 against a built-in opponent."""

from .client import OpenSpielEnv
from .models import OpenSpielAction, OpenSpielObservation, OpenSpielState

__all__ = ["OpenSpielAction", "OpenSpielEnv", "OpenSpielObservation", "OpenSpielState"]
