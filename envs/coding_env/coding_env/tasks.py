"""The shipped task set (`tasks.json`) and the tests given to `reset(tests=...)`.

A task's tests are call expressions and the values they must return. Only the expressions
enter the sandbox; the expected values stay in the server, which compares the JSON data the
judge process reports. So printing a fake verdict or patching anything in the sandbox cannot
pass a test: only returning the right value can.
"""

from __future__ import annotations

import json
import math
import random
from functools import cache
from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel, Field

TASKS_FILE = Path(__file__).with_name("tasks.json")


class TestCase(BaseModel):
    __test__ = False  # not a pytest class

    call: str = Field(min_length=1, description="A Python expression, e.g. 'add(2, 3)'.")
    expected: Any = Field(description="The JSON value the expression must return.")


class Task(BaseModel):
    id: str
    prompt: str = ""
    cases: list[TestCase] = Field(min_length=1)


@cache
def shipped_tasks() -> dict[str, Task]:
    data = json.loads(TASKS_FILE.read_text())
    return {item["id"]: Task.model_validate(item) for item in data}


def pick_task(task_id: str, seed: Optional[int]) -> Task:
    """A shipped task by id; `"random"` picks one from the seed."""
    tasks = shipped_tasks()
    if task_id == "random":
        return tasks[random.Random(seed).choice(sorted(tasks))]
    if task_id not in tasks:
        raise KeyError(task_id)
    return tasks[task_id]


def custom_task(tests: Any, prompt: str = "") -> Task:
    """A task from `reset(tests=[{"call": ..., "expected": ...}, ...])`."""
    return Task(id="custom", prompt=prompt, cases=tests)


def same_value(got: Any, expected: Any) -> bool:
    """JSON equality, with a relative tolerance for floats (and ints compared to floats)."""
    if isinstance(got, bool) or isinstance(expected, bool):
        return got is expected
    if isinstance(got, (int, float)) and isinstance(expected, (int, float)):
        if isinstance(got, int) and isinstance(expected, int):
            return got == expected
        return math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(got, list) and isinstance(expected, list):
        return len(got) == len(expected) and all(map(same_value, got, expected))
    if isinstance(got, dict) and isinstance(expected, dict):
        return got.keys() == expected.keys() and all(same_value(got[k], expected[k]) for k in got)
    return type(got) is type(expected) and got == expected
