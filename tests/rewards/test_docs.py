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


def test_llm_judge_example() -> None:
    block = next(b for b in BLOCKS if "LLMJudge(" in b)
    scope: dict = {}
    exec(block, scope)  # builds the client and judge only: nothing is sent
    client, judge = scope["client"], scope["judge"]
    assert (client.endpoint, client.port, client.base_url) == (
        "http://localhost",
        8001,
        "http://localhost:8001",
    )
    assert judge.score_output("8") == pytest.approx(0.8) and judge.default_score is None
