"""Trading environment: daily stock trading on a shipped price data set."""

from .client import TradingEnv
from .models import TradingAction, TradingObservation, TradingState

__all__ = ["TradingAction", "TradingEnv", "TradingObservation", "TradingState"]
