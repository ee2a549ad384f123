"""Daily stock trading on the shipped prices: orders in shares, costs in basis points."""

from __future__ import annotations

import math
import os
import random
from typing import Any
from uuid import uuid4

from openenv.core.env_server import Environment

from ..market import MARKET, Market
from ..models import TradingAction, TradingObservation, TradingState

REWARD_TYPES = ("pnl", "log_return")


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    return float(raw) if raw else default


class TradingEnvironment(Environment[TradingAction, TradingObservation, TradingState]):
    """An episode trades `window` days from a seeded random start day (or `start_day`).

    Each step executes the orders at the current day's close, then moves to the next day; the
    reward is the change in portfolio value over that step (`reward="pnl"`, the default) or its
    log return (`reward="log_return"`). Defaults come from the constructor or the variables
    `TRADING_WINDOW`, `TRADING_COST_BPS`, `TRADING_INITIAL_CASH`, `TRADING_HISTORY`.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True
    RUNS_ON_EVENT_LOOP = True  # a step is a few microseconds of arithmetic on in-memory data

    def __init__(
        self,
        window: int | None = None,
        cost_bps: float | None = None,
        initial_cash: float | None = None,
        history: int | None = None,
        market: Market = MARKET,
    ) -> None:
        super().__init__()
        self._market = market
        self._window = window or int(_env_float("TRADING_WINDOW", 60))
        self._cost_bps = cost_bps if cost_bps is not None else _env_float("TRADING_COST_BPS", 10.0)
        self._cash = initial_cash or _env_float("TRADING_INITIAL_CASH", 100_000.0)
        self._history = history or int(_env_float("TRADING_HISTORY", 10))
        self._state = TradingState()
        self._active = False

    # -- helpers ----------------------------------------------------------------------

    def _prices(self, day: int) -> tuple[float, ...]:
        return self._market.closes[day]

    def _value(self, day: int) -> float:
        s = self._state
        prices = self._prices(day)
        return s.cash + sum(
            s.holdings[t] * p for t, p in zip(self._market.tickers, prices, strict=True)
        )

    def _observe(
        self,
        reward: float | None = None,
        executed: dict[str, int] | None = None,
        clipped: dict[str, int] | None = None,
        costs: float = 0.0,
    ) -> TradingObservation:
        s, m = self._state, self._market
        day = s.day
        first = day - s.history + 1
        history = {}
        for i, ticker in enumerate(m.tickers):
            # Before the first day of data, the series is padded with the first close.
            history[ticker] = [m.closes[max(d, 0)][i] for d in range(first, day + 1)]
        remaining = s.start_day + s.window - day
        return TradingObservation(
            tickers=list(m.tickers),
            day=day,
            date=m.dates[day],
            prices=dict(zip(m.tickers, self._prices(day), strict=True)),
            history=history,
            cash=s.cash,
            holdings=dict(s.holdings),
            portfolio_value=s.portfolio_value,
            executed=executed or {},
            clipped=clipped or {},
            costs=costs,
            steps_remaining=remaining,
            reward=reward,
            done=remaining <= 0,
        )

    # -- Environment ------------------------------------------------------------------

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        start_day: int | None = None,
        window: int | None = None,
        cost_bps: float | None = None,
        initial_cash: float | None = None,
        history: int | None = None,
        reward: str = "pnl",
        **kwargs: Any,
    ) -> TradingObservation:
        days = self._market.days
        window = int(window if window is not None else self._window)
        history = int(history if history is not None else self._history)
        cost_bps = float(cost_bps if cost_bps is not None else self._cost_bps)
        cash = float(initial_cash if initial_cash is not None else self._cash)
        if not 1 <= window <= days - 1:
            raise ValueError(f"window must be in [1, {days - 1}], got {window}")
        if history < 1:
            raise ValueError(f"history must be at least 1, got {history}")
        if cost_bps < 0 or not math.isfinite(cost_bps):
            raise ValueError(f"cost_bps must be a non-negative number, got {cost_bps}")
        if cash <= 0 or not math.isfinite(cash):
            raise ValueError(f"initial_cash must be positive, got {cash}")
        if reward not in REWARD_TYPES:
            raise ValueError(f"reward must be one of {REWARD_TYPES}, got {reward!r}")
        last_start = days - 1 - window
        if start_day is None:
            # Prefer a start with a full price history behind it.
            low = min(history - 1, last_start)
            start_day = random.Random(seed).randint(low, last_start)
        elif not 0 <= start_day <= last_start:
            raise ValueError(f"start_day must be in [0, {last_start}] for window {window}")
        self._state = TradingState(
            episode_id=episode_id or str(uuid4()),
            seed=seed,
            start_day=start_day,
            day=start_day,
            window=window,
            history=history,
            cash=cash,
            holdings=dict.fromkeys(self._market.tickers, 0),
            portfolio_value=cash,
            initial_cash=cash,
            cost_bps=cost_bps,
            reward_type=reward,
        )
        self._active = True
        return self._observe()

    def step(
        self, action: TradingAction, timeout_s: float | None = None, **kwargs: Any
    ) -> TradingObservation:
        if not self._active:
            raise RuntimeError("The episode is over or was never started: call reset()")
        s, m = self._state, self._market
        rate = s.cost_bps / 10_000
        prices = dict(zip(m.tickers, self._prices(s.day), strict=True))
        before = self._value(s.day)
        executed: dict[str, int] = {}
        clipped: dict[str, int] = {}
        costs = 0.0
        orders = action.orders
        # Sells first (they free cash), clipped to the shares held: no shorting.
        for ticker in m.tickers:
            want = orders.get(ticker, 0)
            if want >= 0:
                continue
            qty = min(-want, s.holdings[ticker])
            if qty != -want:
                clipped[ticker] = want
            if qty:
                notional = qty * prices[ticker]
                fee = notional * rate
                s.cash += notional - fee
                s.holdings[ticker] -= qty
                costs += fee
                executed[ticker] = -qty
        # Then buys in ticker order, clipped to the whole shares the cash affords: no borrowing.
        for ticker in m.tickers:
            want = orders.get(ticker, 0)
            if want <= 0:
                continue
            per_share = prices[ticker] * (1 + rate)
            affordable = max(0, math.floor(s.cash / per_share + 1e-9))
            while affordable and affordable * per_share > s.cash + 1e-9:
                affordable -= 1
            qty = min(want, affordable)
            if qty != want:
                clipped[ticker] = want
            if qty:
                notional = qty * prices[ticker]
                fee = notional * rate
                s.cash = max(0.0, s.cash - notional - fee)
                s.holdings[ticker] += qty
                costs += fee
                executed[ticker] = qty
        s.day += 1
        s.step_count += 1
        s.total_costs += costs
        after = self._value(s.day)
        s.portfolio_value = after
        if s.reward_type == "log_return":
            reward = math.log(after / before) if after > 0 and before > 0 else 0.0
        else:
            reward = after - before
        obs = self._observe(reward=reward, executed=executed, clipped=clipped, costs=costs)
        if obs.done:
            self._active = False
        return obs

    @property
    def state(self) -> TradingState:
        return self._state
