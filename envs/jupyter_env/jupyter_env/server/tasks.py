"""A few data-analysis questions over the small CSVs shipped in `jupyter_env/data`.

The expected answers are computed here from the same files with the standard library, so the
verifier never trusts anything the kernel says: only the agent's submitted answer.
"""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Union

DATA = Path(__file__).resolve().parent.parent / "data"

Rows = list[dict[str, str]]
Answer = Union[float, str]


def _rows(name: str) -> Rows:
    with (DATA / name).open(newline="") as handle:
        return list(csv.DictReader(handle))


def _revenue(row: dict[str, str]) -> float:
    return int(row["units"]) * float(row["unit_price"])


def _argmax(totals: dict[str, float]) -> str:
    return max(sorted(totals), key=lambda key: totals[key])


def _total_by(rows: Rows, key: str, value: Callable[[dict[str, str]], float]) -> dict[str, float]:
    totals: dict[str, float] = defaultdict(float)
    for row in rows:
        totals[row[key]] += value(row)
    return totals


@dataclass(frozen=True)
class Task:
    id: str
    question: str
    files: tuple[str, ...]
    solve: Callable[[], Answer]

    def expected(self) -> Answer:
        return self.solve()

    def check(self, answer: str) -> tuple[bool, str]:
        """Whether `answer` is right, and a one-line verdict for the agent."""
        expected = self.expected()
        if isinstance(expected, float):
            try:
                given = float(answer.strip().replace(",", "").lstrip("$"))
            except ValueError:
                return False, f"expected a number, got {answer.strip()[:80]!r}"
            right = math.isclose(given, expected, rel_tol=1e-6, abs_tol=0.01)
        else:
            right = answer.strip().casefold() == expected.casefold()
        return right, "correct" if right else "wrong"


TASKS: dict[str, Task] = {
    task.id: task
    for task in (
        Task(
            "north_revenue",
            "sales.csv has one row per month, region and product. What is the total revenue "
            "(units * unit_price) of the region 'north' over the year? Answer with a number.",
            ("sales.csv",),
            lambda: round(
                sum(_revenue(r) for r in _rows("sales.csv") if r["region"] == "north"), 2
            ),
        ),
        Task(
            "top_region_units",
            "In sales.csv, which region sold the most units in total? Answer with its name.",
            ("sales.csv",),
            lambda: _argmax(_total_by(_rows("sales.csv"), "region", lambda r: int(r["units"]))),
        ),
        Task(
            "best_month",
            "In sales.csv, which month had the highest total revenue (units * unit_price) "
            "over all regions? Answer as YYYY-MM.",
            ("sales.csv",),
            lambda: _argmax(_total_by(_rows("sales.csv"), "month", _revenue)),
        ),
        Task(
            "rainiest_city",
            "weather.csv has monthly temperature and rainfall per city. Which city had the "
            "most rainfall (rain_mm) over the year? Answer with its name.",
            ("weather.csv",),
            lambda: _argmax(_total_by(_rows("weather.csv"), "city", lambda r: float(r["rain_mm"]))),
        ),
        Task(
            "july_mean_temp",
            "In weather.csv, what is the mean temp_c over all cities in month 7? Answer with "
            "a number rounded to 2 decimals.",
            ("weather.csv",),
            lambda: round(
                sum(float(r["temp_c"]) for r in _rows("weather.csv") if r["month"] == "7")
                / sum(1 for r in _rows("weather.csv") if r["month"] == "7"),
                2,
            ),
        ),
    )
}


def data_file(name: str) -> bytes:
    return (DATA / name).read_bytes()
