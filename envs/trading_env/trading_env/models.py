"""Typed models of the trading environment."""

from __future__ import annotations

from pydantic import Field, field_validator

from openenv.core.env_server.types import Action, Observation, State

from .market import TICKERS


class TradingAction(Action):
    """Orders in **shares** per ticker: positive buys, negative sells, missing or 0 holds.

    Orders execute at today's close. Sells run first, then buys in ticker order; a sell of
    more than is held, or a buy beyond the cash available (costs included), is **clipped** to
    what is feasible (no shorting, no borrowing) and reported in the observation's `clipped`.
    """

    orders: dict[str, int] = Field(default_factory=dict)

    @field_validator("orders")
    @classmethod
    def _known_tickers(cls, orders: dict[str, int]) -> dict[str, int]:
        unknown = sorted(set(orders) - set(TICKERS))
        if unknown:
            raise ValueError(f"unknown tickers {unknown}; known: {list(TICKERS)}")
        return orders


class TradingObservation(Observation):
    tickers: list[str] = Field(default_factory=list)
    day: int = 0
    date: str = ""
    #: today's closes
    prices: dict[str, float] = Field(default_factory=dict)
    #: the last `history` closes per ticker, oldest first, today's last
    history: dict[str, list[float]] = Field(default_factory=dict)
    cash: float = 0.0
    holdings: dict[str, int] = Field(default_factory=dict)
    portfolio_value: float = 0.0
    #: shares actually traded by the last step (after clipping; negative = sold)
    executed: dict[str, int] = Field(default_factory=dict)
    #: tickers whose last order was clipped, with the requested share count
    clipped: dict[str, int] = Field(default_factory=dict)
    #: transaction costs paid in the last step
    costs: float = 0.0
    steps_remaining: int = 0


class TradingState(State):
    seed: int | None = None
    start_day: int = 0
    day: int = 0
    window: int = 0
    history: int = 0
    cash: float = 0.0
    holdings: dict[str, int] = Field(default_factory=dict)
    portfolio_value: float = 0.0
    initial_cash: float = 0.0
    cost_bps: float = 0.0
    total_costs: float = 0.0
    reward_type: str = "pnl"
