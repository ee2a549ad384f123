"""Sample actions generated from JSON Schemas, invalid-action probes, and the schema validator."""

from __future__ import annotations

import datetime
import enum
import uuid
from typing import Literal, Optional

import pytest
from pydantic import BaseModel, ConfigDict, Field

from openenv.core.env_server import Action, CallToolObservation, Observation
from openenv.testing import _jsonutil
from openenv.testing.report import CheckReport, CheckResult, EnvCheckError
from openenv.testing.samples import (
    declared_samples,
    missing_field_probe,
    sample_actions_from_schema,
    sample_value,
    tool_call_samples,
    wrong_type_probe,
)


class Colour(str, enum.Enum):
    RED = "red"
    GREEN = "green"


class Point(BaseModel):
    x: int
    y: float = 0.0


class RichAction(Action):
    small: int = Field(ge=10, le=12)
    positive: float = Field(gt=0, lt=1)
    even: int = Field(multiple_of=2, ge=3)
    flag: bool
    name: str = Field(min_length=12, max_length=14)
    code: str = Field(pattern=r"^[a-z]+\d+$")
    mode: Literal["fast", "slow"]
    colour: Colour
    maybe: Optional[int]
    many: list[int] = Field(min_length=2)
    point: Point
    pair: tuple[int, str]
    table: dict[str, int]
    ident: uuid.UUID
    when: datetime.datetime
    day: datetime.date
    command: str = Field(examples=["look", "go north"])
    optional_flag: bool = False  # optional: never filled


def test_generated_samples_validate_and_vary() -> None:
    samples = sample_actions_from_schema(RichAction.model_json_schema(), 10)
    actions = [RichAction.model_validate(s) for s in samples]
    assert all("optional_flag" not in s and "metadata" not in s for s in samples)
    assert {a.mode for a in actions} == {"fast", "slow"}
    assert {a.colour for a in actions} == {Colour.RED, Colour.GREEN}
    assert {a.flag for a in actions} == {True, False}
    assert [a.command for a in actions[:3]] == ["look", "go north", "look"]
    assert all(10 <= a.small <= 12 and 0 < a.positive < 1 and a.even % 2 == 0 for a in actions)
    assert all(12 <= len(a.name) <= 14 and len(a.many) == 2 for a in actions)
    assert len({a.small for a in actions}) > 1


def test_simple_values() -> None:
    assert [sample_value({"type": "integer"}, i) for i in range(5)] == [1, 2, 3, 0, 4]
    assert sample_value({"type": "integer", "minimum": 100}, 0) == 100
    assert sample_value({"type": "integer", "maximum": -5}, 0) == -5
    assert sample_value({"type": "number"}, 0) == 0.5
    assert sample_value({"type": "string"}, 3) == "sample-3"
    assert sample_value({"type": "string", "maxLength": 2}, 3) == "sa"
    assert sample_value({"enum": ["a", "b"]}, 1) == "b"
    assert sample_value({"const": 7}, 4) == 7
    assert sample_value({"anyOf": [{"type": "null"}, {"type": "boolean"}]}, 0) is True
    assert sample_value({}, 0) == "sample-0"  # anything goes


def test_tool_call_samples() -> None:
    tools = [
        {
            "name": "a",
            "inputSchema": {
                "type": "object",
                "properties": {"n": {"type": "integer"}},
                "required": ["n"],
            },
        },
        {"name": "b", "input_schema": {"type": "object", "properties": {}}},
    ]
    samples = tool_call_samples(tools, 3)
    assert samples[0] == {"type": "call_tool", "tool_name": "a", "arguments": {"n": 1}}
    assert samples[1] == {"type": "call_tool", "tool_name": "b", "arguments": {}}
    assert samples[2]["arguments"] == {"n": 2}
    assert tool_call_samples([], 2) == [{"type": "list_tools"}] * 2


def test_invalid_action_probes() -> None:
    schema = RichAction.model_json_schema()
    base = sample_actions_from_schema(schema, 1)[0]
    field, bad, payload = wrong_type_probe(schema, base)
    assert field == "small" and isinstance(bad, dict) and payload["small"] == bad
    with pytest.raises(Exception, match="small"):
        RichAction.model_validate(payload)
    field, payload = missing_field_probe(schema, base)
    assert field == "small" and "small" not in payload

    class Free(Action):
        anything: object = None

    assert wrong_type_probe(Free.model_json_schema(), {}) is None
    assert missing_field_probe(Free.model_json_schema(), {}) is None


@pytest.mark.parametrize("use_jsonschema", [True, False])
def test_observation_validation(monkeypatch: pytest.MonkeyPatch, use_jsonschema: bool) -> None:
    if not use_jsonschema:
        monkeypatch.setattr(_jsonutil, "_jsonschema", lambda: None)
    schema = CallToolObservation.model_json_schema()
    good = {"tool_name": "t", "result": {"x": 1}, "done": False, "reward": 1, "metadata": {}}
    assert _jsonutil.validate(good, schema) == []
    errors = _jsonutil.validate({"tool_name": 3, "extra": 1, "done": "no"}, schema)
    text = " ".join(errors)
    assert "tool_name" in text and "extra" in text and "done" in text
    assert _jsonutil.validate({"done": False}, Observation.model_json_schema()) == []
    assert _jsonutil.validate({}, schema)  # tool_name is required


def test_first_difference_and_normalize() -> None:
    diff = _jsonutil.first_difference
    assert diff({"a": [1, {"b": 2}]}, {"a": [1, {"b": 3}]}) == "a[1].b: 2 != 3"
    assert diff({"a": 1}, {"a": 1, "c": 2}) == "c: missing != 2"
    assert diff(1, 1.0) == "(value): 1 != 1.0"  # JSON types matter (rewards keep theirs)
    assert diff([1], [1, 2]) == "(value): 1 items != 2 items"
    assert diff({"x": float("nan")}, {"x": float("nan")}) is None
    assert _jsonutil.normalize({"h": object()}) == {"h": "<unserializable object>"}


def test_report_statuses_and_error_message() -> None:
    report = CheckReport(target="X")
    report.add("a", True)
    report.add("b", False, "broken")
    report.add("c", False, "meh", severity="warning")
    report.add("d", True, "skipped: no reason", skipped=True)
    assert [r.status for r in report] == ["pass", "fail", "warn", "skip"]
    assert report.summary() == {
        "passed_count": 2,
        "total_count": 4,
        "failed_criteria": ["b", "c"],
        "required_passed_count": 2,
        "required_total_count": 3,
    }
    assert not report.ok and report.failures == [report["b"]]
    assert isinstance(report["a"], CheckResult)
    assert report.headline() == "X: FAILED (1 passed, 1 failed, 1 warnings, 1 skipped)"
    with pytest.raises(EnvCheckError) as info:
        report.raise_for_failures()
    message = str(info.value)
    assert "- b: broken" in message and "Warnings:" in message and "- c: meh" in message
    report.results.remove(report["b"])
    assert report.ok and report.raise_for_failures() is report


def test_declared_samples_come_from_the_schema_examples() -> None:
    class Move(Action):
        model_config = ConfigDict(json_schema_extra={"examples": [{"to": 3}, "junk", {"to": 4}]})
        to: int

    assert declared_samples(Move.model_json_schema()) == [{"to": 3}, {"to": 4}]
    assert declared_samples(RichAction.model_json_schema()) == []
