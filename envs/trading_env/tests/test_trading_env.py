"""The trading environment: the checker, the shipped data, and real episodes over the wire."""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator

import pytest

from openenv.core.errors import EnvironmentExecutionError, InvalidRequestError
from openenv.testing import check_env, running_server
from trading_env import TradingAction, TradingEnv
from trading_env.data import make_prices
from trading_env.market import MARKET, PRICES_CSV, TICKERS
from trading_env.server.trading_environment import TradingEnvironment


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with running_server("trading_env.server.app:app", env={"TRADING_COST_BPS": "10"}) as url:
        yield url


def _close(day: int, ticker: str) -> float:
    return MARKET.closes[day][TICKERS.index(ticker)]


def test_passes_the_environment_checker() -> None:
    samples = [
        TradingAction(orders={"ALPHA": 10}),
        TradingAction(orders={"ALPHA": -3, "BETA": 2}),
        TradingAction(),
    ]
    report = check_env(lambda: TradingEnvironment(window=5), sample_actions=samples)
    assert report.ok, str(report)
    assert "step_after_done" in str(report)


def test_shipped_prices_are_reproducible_by_the_script() -> None:
    with PRICES_CSV.open(newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["date", *make_prices.TICKERS]
    assert rows[1:] == make_prices.generate()
    assert MARKET.days == 500 and TICKERS == ("ALPHA", "BETA", "GAMMA")
    assert all(p > 0 for day in MARKET.closes for p in day)


async def test_buy_and_hold_episode(server: str) -> None:
    async with TradingEnv(base_url=server) as env:
        result = await env.reset(start_day=100, window=5, history=4, initial_cash=10_000)
        obs = result.observation
        assert obs.day == 100 and obs.date == MARKET.dates[100]
        assert obs.prices == {t: _close(100, t) for t in TICKERS}
        assert obs.history["ALPHA"] == [_close(d, "ALPHA") for d in range(97, 101)]
        assert obs.cash == 10_000 and obs.portfolio_value == 10_000
        assert obs.holdings == dict.fromkeys(TICKERS, 0)
        assert obs.steps_remaining == 5 and not result.done

        price = _close(100, "ALPHA")
        result = await env.step(TradingAction(orders={"ALPHA": 50}))
        fee = 50 * price * 0.001
        assert result.observation.executed == {"ALPHA": 50}
        assert result.observation.costs == pytest.approx(fee)
        assert result.observation.cash == pytest.approx(10_000 - 50 * price - fee)
        assert result.reward == pytest.approx(50 * (_close(101, "ALPHA") - price) - fee)
        total = result.reward
        while not result.done:
            result = await env.step(TradingAction())
            total += result.reward
            assert result.observation.costs == 0.0
        obs = result.observation
        assert obs.day == 105 and obs.steps_remaining == 0
        expected_value = 10_000 - 50 * price - fee + 50 * _close(105, "ALPHA")
        assert obs.portfolio_value == pytest.approx(expected_value)
        assert total == pytest.approx(expected_value - 10_000)

        state = await env.state()
        assert state.step_count == 5 and state.day == 105 and state.start_day == 100
        assert state.holdings == {"ALPHA": 50, "BETA": 0, "GAMMA": 0}
        assert state.total_costs == pytest.approx(fee)
        assert state.cost_bps == 10

        with pytest.raises(EnvironmentExecutionError, match="call reset"):
            await env.step(TradingAction())


async def test_invalid_orders_are_clipped(server: str) -> None:
    async with TradingEnv(base_url=server) as env:
        await env.reset(start_day=10, window=10, initial_cash=1_000, cost_bps=0)
        # Selling what is not held: nothing happens, and the clip is reported.
        result = await env.step(TradingAction(orders={"BETA": -5}))
        assert result.observation.executed == {}
        assert result.observation.clipped == {"BETA": -5}
        assert result.observation.holdings["BETA"] == 0
        assert result.reward == 0.0
        # Buying beyond the cash: clipped to the whole shares affordable.
        price = _close(11, "GAMMA")
        result = await env.step(TradingAction(orders={"GAMMA": 10_000}))
        affordable = math.floor(1_000 / price)
        assert result.observation.executed == {"GAMMA": affordable}
        assert result.observation.clipped == {"GAMMA": 10_000}
        assert 0 <= result.observation.cash < price
        # Selling more than held sells everything held; the freed cash funds a buy.
        beta = _close(12, "BETA")
        result = await env.step(TradingAction(orders={"GAMMA": -10 * affordable, "BETA": 1}))
        assert result.observation.executed == {"GAMMA": -affordable, "BETA": 1}
        assert result.observation.clipped == {"GAMMA": -10 * affordable}
        assert result.observation.holdings == {"ALPHA": 0, "BETA": 1, "GAMMA": 0}
        state = await env.state()
        assert state.cash == pytest.approx(result.observation.cash)
        assert state.cash >= 0 and state.cash == pytest.approx(
            1_000 - affordable * price + affordable * _close(12, "GAMMA") - beta
        )


async def test_unknown_tickers_are_validation_errors(server: str) -> None:
    async with TradingEnv(base_url=server) as env:
        await env.reset(seed=1)
        with pytest.raises(InvalidRequestError) as info:
            await env.step(TradingAction.model_construct(orders={"ZZZ": 1}, metadata={}))
        assert info.value.code == "VALIDATION_ERROR"
        assert "orders" in info.value.data["detail"]
        assert "unknown tickers ['ZZZ']" in info.value.data["detail"]
        ok = await env.step(TradingAction(orders={"ALPHA": 1}))
        assert ok.observation.executed == {"ALPHA": 1}


async def test_seeded_starts_costs_and_log_returns(server: str) -> None:
    async with TradingEnv(base_url=server) as env:
        first = await env.reset(seed=7, window=20)
        again = await env.reset(seed=7, window=20)
        assert first.observation.day == again.observation.day
        assert first.observation.history == again.observation.history
        starts = set()
        for seed in range(8):
            starts.add((await env.reset(seed=seed, window=20)).observation.day)
        assert len(starts) > 1
        assert all(9 <= s <= MARKET.days - 21 for s in starts)

        # Costs scale with cost_bps: the same trade at 0 and 50 bps.
        rewards = {}
        for bps in (0, 50):
            await env.reset(start_day=200, window=3, cost_bps=bps)
            rewards[bps] = (await env.step(TradingAction(orders={"BETA": 100}))).reward
        assert rewards[0] - rewards[50] == pytest.approx(100 * _close(200, "BETA") * 0.005)

        await env.reset(start_day=200, window=3, cost_bps=0, reward="log_return")
        result = await env.step(TradingAction(orders={"ALPHA": 100}))
        value = result.observation.portfolio_value
        assert result.reward == pytest.approx(math.log(value / 100_000))

        with pytest.raises(EnvironmentExecutionError, match="start_day"):
            await env.reset(start_day=MARKET.days - 2, window=5)
        with pytest.raises(EnvironmentExecutionError, match="reward"):
            await env.reset(reward="sharpe")
