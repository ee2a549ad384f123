"""How IOPub messages become nbformat outputs, and how task answers are judged (no kernel)."""

from __future__ import annotations

import csv

import pytest

from jupyter_env.server.kernel import _Outputs
from jupyter_env.server.tasks import DATA, TASKS


def test_streams_merge_and_tracebacks_lose_their_colours() -> None:
    outputs = _Outputs(1000)
    outputs.add("stream", {"name": "stdout", "text": "a"})
    outputs.add("stream", {"name": "stdout", "text": "b\n"})
    outputs.add("stream", {"name": "stderr", "text": "warn\n"})
    outputs.add("status", {"execution_state": "busy"})
    outputs.add(
        "error",
        {"ename": "ValueError", "evalue": "bad", "traceback": ["\x1b[31mValueError\x1b[39m: bad"]},
    )
    assert outputs.outputs == [
        {"output_type": "stream", "name": "stdout", "text": "ab\n"},
        {"output_type": "stream", "name": "stderr", "text": "warn\n"},
        {
            "output_type": "error",
            "ename": "ValueError",
            "evalue": "bad",
            "traceback": ["ValueError: bad"],
        },
    ]
    assert outputs.error == {
        "ename": "ValueError",
        "evalue": "bad",
        "traceback": ["ValueError: bad"],
    }


def test_mime_bundles_keep_known_types_and_updates_replace_by_display_id() -> None:
    outputs = _Outputs(1000)
    outputs.add(
        "display_data",
        {
            "data": {"text/plain": "<Figure>", "image/png": "iVBOR", "application/x-widget": {}},
            "metadata": {"image/png": {"width": 10}},
            "transient": {"display_id": "d1"},
        },
    )
    outputs.add("execute_result", {"data": {"text/plain": "3"}, "execution_count": 4})
    outputs.add(
        "update_display_data", {"data": {"text/plain": "new"}, "transient": {"display_id": "d1"}}
    )
    assert outputs.outputs == [
        {"output_type": "display_data", "data": {"text/plain": "new"}, "metadata": {}},
        {
            "output_type": "execute_result",
            "data": {"text/plain": "3"},
            "metadata": {},
            "execution_count": 4,
        },
    ]


def test_clear_output_and_the_size_budget() -> None:
    outputs = _Outputs(10)
    outputs.add("stream", {"name": "stdout", "text": "old\n"})
    outputs.add("clear_output", {"wait": True})
    assert outputs.outputs  # cleared only when the next output comes
    outputs.add("stream", {"name": "stdout", "text": "0123456789abcdef"})
    assert outputs.outputs == [{"output_type": "stream", "name": "stdout", "text": "012345"}]
    assert outputs.truncated
    outputs.add("display_data", {"data": {"image/png": "x" * 100}})
    assert len(outputs.outputs) == 1


@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_each_task_accepts_its_answer_and_refuses_others(task_id: str) -> None:
    task = TASKS[task_id]
    for name in task.files:
        with (DATA / name).open(newline="") as handle:
            assert list(csv.DictReader(handle))
    expected = task.expected()
    assert task.check(str(expected)) == (True, "correct")
    assert task.check(f"  {str(expected).upper()} ")[0]
    assert not task.check("nonsense")[0]
    if isinstance(expected, float):
        assert task.check(f"{expected + 0.004}")[0]
        assert not task.check(f"{expected + 1}")[0]
