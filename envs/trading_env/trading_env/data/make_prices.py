"""Generate `prices.csv`: 500 trading days of daily closes for 3 fictitious tickers.

Geometric Brownian motion with a fixed seed, so the file is reproducible:
`python -m trading_env.data.make_prices` (or `python make_prices.py`) rewrites it identically.
Dates are weekdays starting 2023-01-02 (no holiday calendar). Prices are rounded to cents.
"""

from __future__ import annotations

import csv
import math
import random
from datetime import date, timedelta
from pathlib import Path

SEED = 20240601
DAYS = 500
START = date(2023, 1, 2)
#: ticker -> (initial price, annual drift, annual volatility)
TICKERS = {
    "ALPHA": (100.0, 0.08, 0.20),
    "BETA": (50.0, 0.02, 0.35),
    "GAMMA": (20.0, 0.12, 0.50),
}
OUT = Path(__file__).with_name("prices.csv")


def trading_days(start: date, count: int) -> list[date]:
    days, day = [], start
    while len(days) < count:
        if day.weekday() < 5:
            days.append(day)
        day += timedelta(days=1)
    return days


def generate(seed: int = SEED, count: int = DAYS) -> list[list[str]]:
    rng = random.Random(seed)
    dt = 1 / 252
    prices = {ticker: spec[0] for ticker, spec in TICKERS.items()}
    rows = []
    for index, day in enumerate(trading_days(START, count)):
        if index:
            for ticker, (_, mu, sigma) in TICKERS.items():
                shock = rng.gauss(0.0, 1.0)
                prices[ticker] *= math.exp(
                    (mu - 0.5 * sigma**2) * dt + sigma * math.sqrt(dt) * shock
                )
        rows.append([day.isoformat(), *(f"{prices[t]:.2f}" for t in TICKERS)])
    return rows


def main() -> None:
    with OUT.open("w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["date", *TICKERS])
        writer.writerows(generate())
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
