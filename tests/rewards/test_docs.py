"""docs/rewards.md: its examples run and say what the page says."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

DOC = (Path(__file__).resolve().parents[2] / "docs" / "rewards.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", DOC, re.S)


def test_first_rubric_example() -> None:
    scope: dict = {}
    exec(BLOCKS[0], scope)
    reward = scope["reward"]
    action = SimpleNamespace(answer="41")
    observation = SimpleNamespace(metadata={"expected": 42})
    assert reward(action, observation) == pytest.approx(0.2)
    assert reward.component_scores() == {"format": 1.0, "correct": 0.0}
    assert dict(reward.named_rubrics())["format"] is reward.get_rubric("format")


def test_group_relative_example() -> None:
    scope: dict = {}
    exec(BLOCKS[-1], scope)
    assert sum(scope["advantages"]) == pytest.approx(0.0)
    assert scope["advantages"][0] > 0 > scope["advantages"][1]
    expected = scope["group_relative_advantages"]([1.0, 0.0, 0.5, 0.5], leave_one_out=True)
    assert scope["rloo"] == pytest.approx(expected)
    assert scope["rloo"] != pytest.approx(scope["advantages"])
