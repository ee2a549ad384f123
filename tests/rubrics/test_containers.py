"""Sequential, Gate, WeightedSum, RubricList and RubricDict."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from openenv.core.rubrics import (
    Gate,
    RubricDict,
    RubricList,
    Sequential,
    WeightedSum,
    failed_rubric_path,
)

from .helpers import ACTION, OBS, AsyncBoom, AsyncConst, Const, Rendezvous

# -- Sequential ----------------------------------------------------------------------------


def test_sequential_returns_last_score_when_none_fail() -> None:
    assert Sequential(Const(1.0), Const(0.5), Const(0.8))(ACTION, OBS) == 0.8


def test_sequential_stops_at_first_zero() -> None:
    a, b, c = Const(1.0), Const(0.0), Const(1.0)
    assert Sequential(a, b, c)(ACTION, OBS) == 0.0
    assert (a.calls, b.calls, c.calls) == (1, 1, 0)


def test_empty_sequential_scores_one() -> None:
    assert Sequential()(ACTION, OBS) == 1.0


def test_sequential_names_and_indexing() -> None:
    a, b, c = Const(1.0), Const(1.0), Const(1.0)
    seq = Sequential(a, b, correct=c)
    assert [name for name, _ in seq.named_children()] == ["rubric_0", "rubric_1", "correct"]
    assert seq.get_rubric("rubric_1") is b and seq.rubric_0 is a
    assert len(seq) == 3 and seq[0] is a and seq[-1] is c and seq["correct"] is c
    assert list(seq) == [a, b, c]
    assert seq.correct is c
    with pytest.raises(TypeError):
        Sequential(Const(1.0), 3)  # type: ignore[arg-type]


async def test_sequential_async_runs_children_in_order_and_fails_fast() -> None:
    log: list[str] = []
    first = AsyncConst(1.0, delay=0.02, log=log, name="first")
    second = AsyncConst(0.0, delay=0.0, log=log, name="second")
    third = AsyncConst(1.0, log=log, name="third")
    seq = Sequential(first, Const(1.0), second, third)
    assert seq.is_async
    assert await seq(ACTION, OBS) == 0.0
    # strictly one after another: the second child starts after the first finished
    assert log == ["start:first", "forward:first", "start:second", "forward:second"]
    assert third.calls == 0


async def test_sequential_with_only_sync_children_in_a_loop_is_awaitable() -> None:
    # OpenEnv's rule: awaitable inside a running loop, unless it stopped early at a 0.
    log: list[str] = []
    seq = Sequential(Const(1.0, log, "a"), Gate(Const(0.5, log, "b"), threshold=0.1))
    result = seq(ACTION, OBS)
    assert inspect.isawaitable(result) and await result == 0.5
    assert log == ["forward:a", "forward:b"]  # evaluated at once, not when awaited
    stopped = Sequential(Const(0.0), Const(1.0))(ACTION, OBS)
    assert not inspect.isawaitable(stopped) and stopped == 0.0


# -- Gate ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("score", "threshold", "expected"),
    [(1.0, 1.0, 1.0), (0.99, 1.0, 0.0), (0.7, 0.5, 0.7), (0.5, 0.5, 0.5), (0.2, 0.5, 0.0)],
)
def test_gate(score: float, threshold: float, expected: float) -> None:
    assert Gate(Const(score), threshold=threshold)(ACTION, OBS) == expected


async def test_async_gate() -> None:
    assert await Gate(AsyncConst(0.6), threshold=0.5)(ACTION, OBS) == 0.6
    assert await Gate(AsyncConst(0.4), threshold=0.5)(ACTION, OBS) == 0.0


# -- WeightedSum -------------------------------------------------------------------------------


def test_weighted_sum_value_and_weights_copy() -> None:
    total = WeightedSum([Const(1.0), Const(0.5), Const(0.0)], [0.5, 0.3, 0.2])
    assert total(ACTION, OBS) == pytest.approx(0.65)
    weights = total.weights
    weights[0] = 42.0
    assert total.weights == [0.5, 0.3, 0.2]


def test_weighted_sum_validation() -> None:
    with pytest.raises(ValueError, match="one weight per rubric"):
        WeightedSum([Const(1.0), Const(1.0)], [1.0])
    with pytest.raises(ValueError, match="sum to 1"):
        WeightedSum([Const(1.0), Const(1.0)], [0.5, 0.6])
    WeightedSum([Const(1.0), Const(1.0)], [0.5, 0.5 + 5e-7])  # within 1e-6
    with pytest.raises(ValueError, match="sum to 1"):
        WeightedSum([Const(1.0), Const(1.0)], [0.5, 0.5 + 5e-6])
    with pytest.raises(ValueError, match="finite"):
        WeightedSum([Const(1.0), Const(1.0)], [float("nan"), 1.0])
    with pytest.raises(ValueError):
        WeightedSum({"a": Const(1.0)}, {"b": 1.0})


def test_weighted_sum_with_named_children() -> None:
    total = WeightedSum(
        {"format": Const(1.0), "correct": Const(0.0)}, {"correct": 0.7, "format": 0.3}
    )
    assert total.weights == [0.3, 0.7]
    assert total(ACTION, OBS) == pytest.approx(0.3)
    assert total.component_scores() == {"format": 1.0, "correct": 0.0}


async def test_weighted_sum_runs_async_children_concurrently() -> None:
    log: list[str] = []
    meet = Rendezvous(2)  # one after the other, a would wait for b in vain
    a = AsyncConst(1.0, log=log, name="a", meet=meet)
    b = AsyncConst(0.5, log=log, name="b", meet=meet)
    total = WeightedSum([a, b], [0.5, 0.5])
    assert await total(ACTION, OBS) == pytest.approx(0.75)
    # both started before either finished
    assert log[:2] == ["start:a", "start:b"]
    assert sorted(log[2:]) == ["forward:a", "forward:b"]


async def test_weighted_sum_concurrency_through_nested_containers() -> None:
    meet = Rendezvous(2)  # one after the other, the first would wait for the second in vain
    total = WeightedSum(
        [
            Gate(AsyncConst(1.0, meet=meet)),
            Sequential(Const(1.0), AsyncConst(1.0, meet=meet)),
            Const(1),
        ],
        [0.25, 0.25, 0.5],
    )
    assert await total.ascore(ACTION, OBS) == pytest.approx(1.0)


async def test_weighted_sum_failure_cancels_pending_siblings() -> None:
    slow = AsyncConst(1.0, delay=3600.0)  # waited for instead of cancelled: the test times out
    total = WeightedSum({"slow": slow, "bad": AsyncBoom(delay=0.01)}, [0.5, 0.5])
    with pytest.raises(RuntimeError) as info:
        await total(ACTION, OBS)
    assert failed_rubric_path(info.value) == "bad"
    assert slow.cancelled


def test_weighted_sum_state_dict_round_trip() -> None:
    total = WeightedSum([Const(1.0), Const(0.0)], [0.5, 0.5])
    total.load_state_dict({"weights": [0.25, 0.75]})
    assert total(ACTION, OBS) == 0.25
    with pytest.raises(ValueError):
        total.load_state_dict({"weights": [0.5, 0.6]})
    with pytest.raises(ValueError):
        total.load_state_dict({"weights": [1.0]})


# -- RubricList / RubricDict -------------------------------------------------------------------


def test_rubric_list() -> None:
    a, b, c = Const(1.0), Const(0.5), Const(0.0)
    items = RubricList([a, b])
    items.append(c)
    assert len(items) == 3 and items[1] is b and items[-1] is c and list(items) == [a, b, c]
    assert [path for path, _ in items.named_rubrics()] == ["rubric_0", "rubric_1", "rubric_2"]
    items.extend([Const(1.0)])
    assert len(items) == 4
    assert items[1](ACTION, OBS) == 0.5
    with pytest.raises(NotImplementedError, match="WeightedSum"):
        items.forward(ACTION, OBS)
    with pytest.raises(NotImplementedError):
        items(ACTION, OBS)


def test_rubric_dict() -> None:
    fmt, correct = Const(1.0), Const(0.0)
    table = RubricDict({"format": fmt})
    table["correct"] = correct
    table.update([("keys", Const(0.5))])  # a key that is also a method name
    assert "format" in table and "nope" not in table
    assert len(table) == 3 and list(table) == ["format", "correct", "keys"]
    assert table.keys() == ["format", "correct", "keys"]
    assert table.values()[0] is fmt and table.items()[1] == ("correct", correct)
    assert table["keys"](ACTION, OBS) == 0.5
    assert table.get_rubric("correct") is correct
    del table["keys"]
    assert table.keys() == ["format", "correct"]
    with pytest.raises(ValueError):
        table["a.b"] = Const(1.0)
    with pytest.raises(TypeError):
        table["x"] = 1.0  # type: ignore[assignment]
    with pytest.raises(NotImplementedError, match="RubricDict"):
        table.forward(ACTION, OBS)


async def test_containers_hold_async_rubrics() -> None:
    table = RubricDict({"judge": AsyncConst(0.5)})
    assert table.is_async
    assert await table["judge"].ascore(ACTION, OBS) == 0.5
    with pytest.raises(NotImplementedError):
        table(ACTION, OBS)  # raises at once, as in OpenEnv, though an entry is async


async def test_sync_and_async_children_mix_in_weighted_sum() -> None:
    log: list[str] = []
    total = WeightedSum(
        [Const(1.0, log, "sync"), AsyncConst(0.0, delay=0.01, log=log, name="async")], [0.5, 0.5]
    )
    assert await total(ACTION, OBS) == 0.5
    assert sorted(log) == ["forward:async", "forward:sync", "start:async"]
    await asyncio.sleep(0)
