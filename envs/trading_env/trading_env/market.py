"""The shipped daily prices (`data/prices.csv`), loaded once with the csv module."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

PRICES_CSV = Path(__file__).parent / "data" / "prices.csv"


@dataclass(frozen=True)
class Market:
    tickers: tuple[str, ...]
    dates: tuple[str, ...]
    #: closes[day][i] is the close of tickers[i] on dates[day]
    closes: tuple[tuple[float, ...], ...]

    @property
    def days(self) -> int:
        return len(self.dates)


def load_market(path: Path = PRICES_CSV) -> Market:
    with path.open(newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader)
        rows = [row for row in reader if row]
    return Market(
        tickers=tuple(header[1:]),
        dates=tuple(row[0] for row in rows),
        closes=tuple(tuple(float(x) for x in row[1:]) for row in rows),
    )


MARKET = load_market()
TICKERS = MARKET.tickers
