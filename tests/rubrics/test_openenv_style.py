"""Rubric code written the way OpenEnv 0.10's documentation shows it, run against this package.

The snippets are tests/compat/rubric_snippets.py (tests/compat/test_rubrics_api.py also runs them
on the published package and compares); here they run in process, without the compat venv, and
the expected values are what OpenEnv 0.10 gives, apart from the deliberate differences of
docs/compatibility.md. The judge's model is the snippets' loopback test double, not a real LLM.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.compat import rubric_snippets as snippets


def _value(result: dict[str, Any]) -> tuple[float, str]:
    assert "raises" not in result, result
    return result["value"], result["kind"]


def test_a_rubric_keeping_its_score_in_an_attribute() -> None:
    out = snippets.check_score_attribute()
    assert _value(out["sequential"]) == (0.6, "float")
    assert _value(out["gate"]) == (0.8, "float")
    assert _value(out["weighted_sum"]) == (0.6, "float")
    assert out["sequential_own_attribute"] == [0.8, 0.6]
    assert out["weighted_sum_last_scores"] == {"rubric_0": 0.8, "rubric_1": 0.4}


def test_child_names() -> None:
    out = snippets.check_names()
    assert out["sequential"] == ["rubric_0", "rubric_1", "rubric_1.rubric"]
    assert out["weighted_sum"] == out["rubric_list"] == ["rubric_0", "rubric_1"]
    assert out["rubric_dict"] == ["pong", "breakout"]
    assert out["get_rubric"] == "Const" and out["missing_path"] == {"raises": "KeyError"}


def test_errors_keep_their_type() -> None:
    out = snippets.check_errors()
    assert {case: result["raises"] for case, result in out.items()} == {
        "leaf": "KeyError",
        "in_sequential": "KeyError",
        "in_gate": "KeyError",
        "in_weighted_sum": "KeyError",
        "pre_hook": "ValueError",
        "post_hook": "RuntimeError",
        "rubric_list": "NotImplementedError",
        "rubric_dict": "NotImplementedError",
        "weights_must_sum_to_one": "ValueError",
        "one_weight_per_rubric": "ValueError",
        "gamma_range": "ValueError",
    }


def test_what_needs_awaiting_inside_a_running_loop() -> None:
    out = snippets.check_running_loop()
    awaitable = {case for case, result in out.items() if _value(result)[1] == "awaitable"}
    assert awaitable == {
        "sequential",
        "sequential_empty",
        "gate_of_sequential",
        "weighted_sum_of_sequential",
        "sequential_of_sequential",
    }
    assert _value(out["sequential_zero_first"]) == (0.0, "float")


def test_trajectory_rubrics_from_the_docstrings() -> None:
    out = snippets.check_trajectory()
    assert out["rewards"] == [0.0, 0.0, 1.0] and out["step_rewards"] == [1.0, 1.0, 1.0]
    assert out["after_reset"] == 0 and out["intermediate"] == 0.1
    assert out["chess_step_rewards"] == [0.5, 1.0]


def test_judge_over_an_openai_compatible_double() -> None:
    out = snippets.check_judge()
    assert _value(out["plain"]) == (0.7, "awaitable")
    assert _value(out["above_one"])[0] == 1.0  # clamped, as in OpenEnv
    assert _value(out["no_score_with_default"])[0] == 0.0  # the user's opt-in
    assert out["no_score"] == {"raises": "JudgeError"}  # never a silent score otherwise
    assert _value(out["out_of_ten"])[0] == pytest.approx(0.8)
    assert _value(out["out_of_ten_first_number"])[0] == 1.0  # OpenEnv's pattern, explicitly
    assert out["unreachable_with_default"] == {"raises": "LLMUnavailableError"}
    assert out["bad_template"] == {"raises": "KeyError"}


def test_llm_clients() -> None:
    out = snippets.check_llm_clients()
    assert out["echo"] == ["http://localhost", 8000, "http://localhost:8000", "HI"]
    assert out["echo_tools"] == "NotImplementedError"
    assert out["openai"] == ["http://127.0.0.1", True, "judge", 256]
    assert out["openai_complete"] == "fine"
    assert out["with_path"] == ["http://127.0.0.1:8000/v1", None, "http://127.0.0.1:8000/v1"]
    assert out["port_conflict"] == {"raises": "ValueError"}
    assert out["positional"] == ["judge", "Be brief.", 0.5, 64]
