"""Collecting test_trl.py imports torch, transformers and TRL (seconds of CPU); its tests are all
`slow`, so a run whose `-m` deselects `slow` (the default) does not import it at all."""

from __future__ import annotations

from pathlib import Path

import pytest
from _pytest.mark.expression import Expression


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if collection_path.name != "test_trl.py":
        return None
    markexpr = config.getoption("markexpr") or ""
    if not markexpr:
        return None
    selects_slow = Expression.compile(markexpr).evaluate(lambda name, **kwargs: name == "slow")
    return True if not selects_slow else None
