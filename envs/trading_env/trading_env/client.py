"""Typed client of the trading environment."""

from __future__ import annotations

from openenv.core import EnvClient

from .models import TradingAction, TradingObservation, TradingState


class TradingEnv(EnvClient[TradingAction, TradingObservation, TradingState]):
    """`reset(seed=0, window=20)`, then `step(TradingAction(orders={"ALPHA": 10}))`."""
