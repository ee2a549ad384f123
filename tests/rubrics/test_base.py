"""The Rubric base: sync/async calling, tree API, hooks, reset, state dicts and errors."""

from __future__ import annotations

import asyncio
import copy
import inspect
import pickle
from typing import Any

import pytest

from openenv.core.rubrics import (
    AwaitableScore,
    Gate,
    Rubric,
    RubricDict,
    Sequential,
    WeightedSum,
    failed_rubric_path,
)

from .helpers import ACTION, OBS, AsyncBoom, AsyncConst, Boom, Const, trace_hooks

# -- calling: sync trees give floats, async trees give awaitables ---------------------------


def test_sync_rubric_returns_float_without_loop() -> None:
    rubric = Const(0.5)
    result = rubric(ACTION, OBS)
    assert result == 0.5 and isinstance(result, float)
    assert rubric.last_score == 0.5
    assert rubric.score(ACTION, OBS) == 0.5


async def test_sync_tree_returns_float_inside_running_loop() -> None:
    asyncio.get_running_loop()  # a loop is running in this thread
    trees: list[Rubric] = [
        Const(0.5),
        Gate(Const(0.9), threshold=0.5),
        WeightedSum([Const(1.0), Gate(Const(0.5), 0.1)], [0.5, 0.5]),
        Sequential(Const(0.0), Const(1.0)),  # stopped at a 0: a plain float, as in OpenEnv
    ]
    for tree in trees:
        assert not tree.is_async
        result = tree(ACTION, OBS)
        assert not inspect.isawaitable(result), type(tree).__name__
        assert type(result) is float
        assert await tree.ascore(ACTION, OBS) == result
        assert tree.score(ACTION, OBS) == result


async def test_sync_sequential_in_a_running_loop_is_awaitable_as_in_openenv() -> None:
    trees: list[Rubric] = [
        Sequential(Const(1.0), Const(0.25)),
        Sequential(),
        Gate(Sequential(Const(0.25)), threshold=0.1),
        WeightedSum([Const(1.0), Sequential(Const(0.5))], [0.5, 0.5]),
    ]
    for tree in trees:
        result = tree(ACTION, OBS)
        assert inspect.isawaitable(result) and isinstance(result, AwaitableScore)
        value = await result
        assert type(value) is float and value == result  # also usable as the number itself
        assert tree.last_score == value and type(tree.last_score) is float
        assert type(tree.score(ACTION, OBS)) is float
        assert type(await tree.ascore(ACTION, OBS)) is float


def test_sync_sequential_without_loop_returns_float() -> None:
    result = Gate(Sequential(Const(1.0), Const(0.25)), threshold=0.1)(ACTION, OBS)
    assert type(result) is float and result == 0.25


def test_bool_and_int_results_become_float() -> None:
    class Flag(Rubric):
        def forward(self, action: Any, observation: Any) -> bool:
            return True

    result = Flag()(ACTION, OBS)
    assert result == 1.0 and type(result) is float


async def test_async_rubric_returns_awaitable() -> None:
    rubric = AsyncConst(0.75)
    assert rubric.is_async
    pending = rubric(ACTION, OBS)
    assert inspect.isawaitable(pending)
    assert await pending == 0.75
    assert rubric.last_score == 0.75
    assert await rubric.ascore(ACTION, OBS) == 0.75


def test_score_runs_async_tree_without_loop() -> None:
    tree = WeightedSum([AsyncConst(1.0), Const(0.0)], [0.5, 0.5])
    assert tree.score(ACTION, OBS) == 0.5


async def test_score_runs_async_tree_inside_running_loop() -> None:
    tree = Sequential(Const(1.0), AsyncConst(0.3, delay=0.01))
    assert tree.score(ACTION, OBS) == 0.3  # on a helper thread, no deadlock


def test_async_descendant_makes_ancestors_async() -> None:
    leaf = AsyncConst(1.0)
    tree = Sequential(Gate(Sequential(Const(1.0), leaf)))
    assert tree.is_async
    assert not Sequential(Gate(Const(1.0))).is_async


def test_async_hook_makes_rubric_async() -> None:
    rubric = Const(1.0)

    async def hook(r: Rubric, action: Any, observation: Any) -> None:
        pass

    handle = rubric.register_forward_pre_hook(hook)
    assert rubric.is_async
    handle.remove()
    assert not rubric.is_async


async def test_a_sync_forward_returning_an_awaitable_makes_the_call_awaitable() -> None:
    async def later() -> float:
        return 1.0

    class Sneaky(Rubric):  # OpenEnv accepts this too
        def forward(self, action: Any, observation: Any) -> Any:
            return later()

    rubric = Sneaky()
    pending = rubric(ACTION, OBS)
    assert inspect.iscoroutine(pending) and rubric.last_score is None
    assert await pending == 1.0 and rubric.last_score == 1.0
    assert rubric.score(ACTION, OBS) == 1.0 and await rubric.ascore(ACTION, OBS) == 1.0


async def test_a_dispatching_rubric_is_awaitable_only_when_its_child_is() -> None:
    class MultiGame(Rubric):  # as in OpenEnv's rubrics tutorial
        def __init__(self) -> None:
            super().__init__()
            self.games = RubricDict({"pong": Const(1.0), "judge": AsyncConst(0.25)})

        def forward(self, action: Any, observation: Any) -> Any:
            return self.games[observation](action, observation)

    rubric = MultiGame()
    assert rubric.is_async
    assert rubric(ACTION, "pong") == 1.0  # a plain float, as in OpenEnv
    pending = rubric(ACTION, "judge")
    assert inspect.isawaitable(pending) and await pending == 0.25
    assert rubric.component_scores() == {"games.judge": 0.25}
    assert await rubric.ascore(ACTION, "pong") == 1.0


async def test_a_dispatched_async_child_failure_reports_its_path() -> None:
    class Dispatch(Rubric):
        def __init__(self) -> None:
            super().__init__()
            self.games = RubricDict({"bad": AsyncBoom()})

        def forward(self, action: Any, observation: Any) -> Any:
            return self.games["bad"](action, observation)

    with pytest.raises(RuntimeError) as info:
        await Dispatch()(ACTION, OBS)
    assert failed_rubric_path(info.value) == "games.bad"


async def test_custom_forward_passing_on_a_childs_awaitable() -> None:
    class PassOn(Rubric):  # OpenEnv style: return the child's result as it is
        def __init__(self) -> None:
            super().__init__()
            self.inner = Sequential(Const(0.5))

        def forward(self, action: Any, observation: Any) -> Any:
            return self.inner(action, observation)

    rubric = PassOn()
    assert await rubric(ACTION, OBS) == 0.5 and rubric.last_score == 0.5


async def test_custom_async_composite_awaits_children_with_ascore() -> None:
    class Both(Rubric):
        def __init__(self) -> None:
            super().__init__()
            self.fast = Const(0.5)
            self.slow = AsyncConst(0.25, delay=0.01)

        async def forward(self, action: Any, observation: Any) -> float:
            return await self.fast.ascore(action, observation) + await self.slow.ascore(
                action, observation
            )

    both = Both()
    assert await both(ACTION, OBS) == 0.75
    assert both.component_scores() == {"fast": 0.5, "slow": 0.25}


# -- the tree ------------------------------------------------------------------------------


class Checks(Rubric):
    def __init__(self) -> None:
        super().__init__()
        self.format = Const(1.0)
        self.correct = Const(0.0)
        self.threshold = 0.5

    def forward(self, action: Any, observation: Any) -> float:
        return self.format(action, observation) * self.correct(action, observation)


class Root(Rubric):
    def __init__(self) -> None:
        super().__init__()
        self.checks = Checks()
        self.style = Const(0.5)

    def forward(self, action: Any, observation: Any) -> float:
        return self.checks(action, observation) + self.style(action, observation)


def test_children_registered_by_attribute_assignment() -> None:
    root = Root()
    assert [name for name, _ in root.named_children()] == ["checks", "style"]
    assert list(root.children()) == [root.checks, root.style]
    assert [path for path, _ in root.named_rubrics()] == [
        "checks",
        "checks.format",
        "checks.correct",
        "style",
    ]
    assert [path for path, _ in root.named_rubrics(prefix="env")] == [
        "env.checks",
        "env.checks.format",
        "env.checks.correct",
        "env.style",
    ]
    assert list(root.rubrics()) == [r for _, r in root.named_rubrics()]
    assert root.get_rubric("checks.correct") is root.checks.correct
    assert root.get_rubric("style") is root.style


def test_get_rubric_missing_path_raises_clear_key_error() -> None:
    root = Root()
    with pytest.raises(KeyError) as info:
        root.get_rubric("checks.missing")
    message = str(info.value)
    assert "Rubric path not found: 'checks.missing'" in message
    assert "'format'" in message and "'correct'" in message
    with pytest.raises(KeyError):
        root.get_rubric("nope")


def test_reassigning_or_deleting_an_attribute_unregisters_the_child() -> None:
    root = Root()
    root.style = None
    assert [name for name, _ in root.named_children()] == ["checks"]
    del root.checks
    assert list(root.children()) == []
    root.extra = Const(1.0)
    assert root.get_rubric("extra") is root.extra


def test_non_identifier_names_with_add_rubric() -> None:
    root = Root()
    child = Const(1.0)
    root.add_rubric("format-check", child)
    assert getattr(root, "format-check") is child
    assert root.get_rubric("format-check") is child
    with pytest.raises(ValueError):
        root.add_rubric("a.b", Const(1.0))


def test_cycles_and_shadowing_methods_are_rejected() -> None:
    root = Root()
    with pytest.raises(ValueError, match="cycle"):
        root.checks.back = root
    with pytest.raises(ValueError, match="cycle"):
        root.me = root
    with pytest.raises(AttributeError, match="reset"):
        root.reset = Const(1.0)


def test_subclass_that_skips_super_init_still_registers_children() -> None:
    class Lazy(Rubric):
        def __init__(self) -> None:
            self.inner = Const(0.25)

        def forward(self, action: Any, observation: Any) -> float:
            return self.inner(action, observation)

    lazy = Lazy()
    assert lazy(ACTION, OBS) == 0.25
    assert lazy.component_scores() == {"inner": 0.25}


def test_shared_child_is_listed_under_each_path() -> None:
    shared = Const(0.5)
    tree = Sequential(shared, Gate(shared, threshold=0.1))
    assert [path for path, _ in tree.named_rubrics()] == ["rubric_0", "rubric_1", "rubric_1.rubric"]
    assert tree(ACTION, OBS) == 0.5
    assert tree.component_scores() == {"rubric_0": 0.5, "rubric_1": 0.5, "rubric_1.rubric": 0.5}


def test_deepcopy_gives_an_independent_tree() -> None:
    root = Root()
    clone = copy.deepcopy(root)
    assert clone.checks is not root.checks
    assert clone.get_rubric("checks.format") is clone.checks.format
    clone.checks.format.value = 0.0
    assert root.checks.format.value == 1.0


def test_repr_shows_the_tree() -> None:
    text = repr(WeightedSum({"a": Const(1.0), "b": Gate(Const(1.0))}, [0.5, 0.5]))
    assert "WeightedSum(weights=[0.5, 0.5]" in text
    assert "(b): Gate(threshold=1.0" in text


# -- hooks ---------------------------------------------------------------------------------


def test_leaf_hook_order_and_last_score() -> None:
    log: list[str] = []
    leaf = Const(0.5, log=log, name="leaf")
    trace_hooks(leaf, "leaf", log)
    leaf(ACTION, OBS)
    assert log == ["pre:leaf", "forward:leaf", "post:leaf=0.5"]


def test_container_pre_hooks_fire_before_children() -> None:
    log: list[str] = []
    a, b = Const(1.0, log, "a"), Const(0.5, log, "b")
    seq = Sequential(a, b)
    trace_hooks(seq, "seq", log)
    trace_hooks(a, "a", log)
    trace_hooks(b, "b", log)
    assert seq(ACTION, OBS) == 0.5
    assert log == [
        "pre:seq",
        "pre:a",
        "forward:a",
        "post:a=1",
        "pre:b",
        "forward:b",
        "post:b=0.5",
        "post:seq=0.5",
    ]


async def test_async_container_hook_order_with_async_hooks() -> None:
    log: list[str] = []
    a = AsyncConst(1.0, delay=0.01, log=log, name="a")
    b = Const(0.5, log=log, name="b")
    total = WeightedSum({"a": a, "b": b}, [0.5, 0.5])
    gate = Gate(total, threshold=0.1)

    async def apre(r: Rubric, action: Any, observation: Any) -> None:
        await asyncio.sleep(0)
        log.append("apre:gate")

    async def apost(r: Rubric, action: Any, observation: Any, score: float) -> None:
        await asyncio.sleep(0)
        log.append(f"apost:gate={score:g}")

    gate.register_forward_pre_hook(apre)
    gate.register_forward_hook(apost)
    trace_hooks(total, "sum", log)
    trace_hooks(a, "a", log)
    trace_hooks(b, "b", log)
    assert await gate(ACTION, OBS) == 0.75
    assert log[:2] == ["apre:gate", "pre:sum"]
    assert log[-2:] == ["post:sum=0.75", "apost:gate=0.75"]
    # each child is bracketed by its own hooks, all inside the container's
    for name, score in (("a", "1"), ("b", "0.5")):
        assert (
            log.index(f"pre:{name}")
            < log.index(f"forward:{name}")
            < log.index(f"post:{name}={score}")
        )


def test_hook_handles_remove_and_multiple_hooks_run_in_order() -> None:
    log: list[str] = []
    leaf = Const(1.0)
    first = leaf.register_forward_hook(lambda r, a, o, s: log.append("first"))
    leaf.register_forward_hook(lambda r, a, o, s: log.append("second"))
    with leaf.register_forward_pre_hook(lambda r, a, o: log.append("pre")):
        leaf(ACTION, OBS)
    assert log == ["pre", "first", "second"]
    log.clear()
    first.remove()
    first.remove()  # idempotent
    leaf(ACTION, OBS)
    assert log == ["second"]  # the pre-hook was removed on leaving the with block


def test_hook_return_values_are_ignored() -> None:
    leaf = Const(0.5)
    leaf.register_forward_hook(lambda r, a, o, s: 99.0)
    assert leaf(ACTION, OBS) == 0.5


def test_hooks_receive_rubric_action_and_observation() -> None:
    seen: list[tuple[Any, ...]] = []
    leaf = Const(0.5)
    leaf.register_forward_pre_hook(lambda r, a, o: seen.append((r, a, o)))
    leaf(ACTION, OBS)
    assert seen == [(leaf, ACTION, OBS)]


# -- last_score and component_scores ------------------------------------------------------


def test_component_scores_report_this_evaluation_only() -> None:
    fmt, correct = Const(1.0), Const(0.0)
    tree = Sequential(format=fmt, correct=correct)
    assert tree.component_scores() == {}
    assert tree(ACTION, OBS) == 0.0
    assert tree.component_scores() == {"format": 1.0, "correct": 0.0}
    fmt.value = 0.0  # now Sequential stops before `correct`
    tree(ACTION, OBS)
    assert tree.component_scores() == {"format": 0.0}
    assert correct.last_score is None  # not stale from the previous step


def test_component_scores_nested_paths() -> None:
    root = Root()
    root(ACTION, OBS)
    assert root.last_score == 0.5
    assert root.component_scores() == {
        "checks": 0.0,
        "checks.format": 1.0,
        "checks.correct": 0.0,
        "style": 0.5,
    }


# -- reset --------------------------------------------------------------------------------


class Counter(Rubric):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.resets = 0

    def forward(self, action: Any, observation: Any) -> float:
        self.count += 1
        return float(self.count)

    def reset(self) -> None:
        self.count = 0
        self.resets += 1
        super().reset()


class AsyncCleanup(Rubric):
    def __init__(self) -> None:
        super().__init__()
        self.async_resets = 0
        self.sync_resets = 0

    def forward(self, action: Any, observation: Any) -> float:
        return 1.0

    def reset(self) -> None:
        self.sync_resets += 1
        super().reset()

    async def reset_async(self) -> None:
        await asyncio.sleep(0)
        self.async_resets += 1
        await super().reset_async()


def test_reset_is_recursive() -> None:
    inner, cleanup = Counter(), AsyncCleanup()
    tree = Sequential(Gate(inner, threshold=0.0), cleanup)
    tree(ACTION, OBS)
    tree(ACTION, OBS)
    assert inner.count == 2
    tree.reset()
    assert inner.count == 0 and inner.resets == 1
    assert tree.last_score is None and inner.last_score is None
    # a child with its own async reset gets it run to completion
    assert cleanup.async_resets == 1 and cleanup.sync_resets == 1


async def test_reset_async_is_recursive_and_awaits_async_resets() -> None:
    inner, cleanup = Counter(), AsyncCleanup()
    tree = WeightedSum([inner, Gate(cleanup)], [0.5, 0.5])
    tree(ACTION, OBS)
    await tree.reset_async()
    assert inner.count == 0 and inner.resets == 1  # reset exactly once
    assert cleanup.async_resets == 1 and cleanup.sync_resets == 1
    assert tree.component_scores() == {}


# -- state dicts --------------------------------------------------------------------------


def test_state_dict_is_recursive_with_dot_paths() -> None:
    tree = Sequential(gate=Gate(Const(1.0), threshold=0.7), sum=WeightedSum([Const(1)], [1.0]))
    assert tree.state_dict() == {"gate.threshold": 0.7, "sum.weights": [1.0]}


def test_load_state_dict_round_trip_and_strictness() -> None:
    source = Sequential(gate=Gate(Const(1.0), threshold=0.7))
    target = Sequential(gate=Gate(Const(1.0), threshold=1.0))
    target.load_state_dict(source.state_dict())
    assert target.gate.threshold == 0.7
    with pytest.raises(KeyError, match=r"gate\.nope"):
        target.load_state_dict({"gate.nope": 1})
    target.load_state_dict({"gate.nope": 1, "gate.threshold": 0.2}, strict=False)
    assert target.gate.threshold == 0.2
    target.load_state_dict({})  # missing keys keep their values
    assert target.gate.threshold == 0.2


# -- errors -------------------------------------------------------------------------------


def test_leaf_error_propagates_with_its_own_type() -> None:
    with pytest.raises(ValueError, match="boom") as info:
        Boom()(ACTION, OBS)
    assert failed_rubric_path(info.value) == ""
    assert "raised by rubric <root> (Boom)" in info.value.__notes__


def test_nested_error_reports_path_of_failing_rubric() -> None:
    boom = Boom()
    tree = Sequential(checks=Sequential(format=Const(1.0), correct=boom))
    with pytest.raises(ValueError) as info:
        tree(ACTION, OBS)
    assert failed_rubric_path(info.value) == "checks.correct"
    assert "raised by rubric 'checks.correct' (Boom)" in info.value.__notes__
    assert tree.last_score is None  # no score, and certainly not 0


async def test_async_nested_error_reports_path() -> None:
    tree = WeightedSum({"ok": AsyncConst(1.0), "judge": Gate(AsyncBoom())}, [0.5, 0.5])
    with pytest.raises(RuntimeError, match="async boom") as info:
        await tree(ACTION, OBS)
    assert failed_rubric_path(info.value) == "judge.rubric"
    with pytest.raises(RuntimeError):
        tree.score(ACTION, OBS)


def test_hook_errors_propagate_with_their_own_type() -> None:
    leaf = Const(1.0)

    def bad_hook(r: Rubric, a: Any, o: Any, s: float) -> None:
        raise KeyError("hook")

    leaf.register_forward_hook(bad_hook)
    with pytest.raises(KeyError) as info:
        Gate(leaf)(ACTION, OBS)
    assert failed_rubric_path(info.value) == "rubric"


def test_rubric_failures_pickle_without_the_rubric() -> None:
    class Unpicklable(Rubric):
        def __init__(self) -> None:
            super().__init__()
            self.lock = __import__("threading").Lock()

        def forward(self, action: Any, observation: Any) -> float:
            raise ValueError("boom")

    with pytest.raises(ValueError) as info:
        Sequential(checks=Unpicklable())(ACTION, OBS)
    clone = pickle.loads(pickle.dumps(info.value))
    assert type(clone) is ValueError and failed_rubric_path(clone) == "checks"


def test_an_error_raised_again_reports_its_new_place() -> None:
    boom = Boom()  # raises the same exception object every time
    with pytest.raises(ValueError) as first:
        Sequential(a=boom)(ACTION, OBS)
    with pytest.raises(ValueError) as second:
        Gate(boom)(ACTION, OBS)
    assert first.value is second.value
    assert failed_rubric_path(second.value) == "rubric"


def test_plain_values_are_not_errors() -> None:
    assert failed_rubric_path(ValueError("not from a rubric")) is None


@pytest.mark.parametrize("bad", [None, "0.5", float("nan"), float("inf"), [1.0]])
def test_non_numeric_or_non_finite_results_are_errors(bad: Any) -> None:
    class Bad(Rubric):
        def forward(self, action: Any, observation: Any) -> Any:
            return bad

    with pytest.raises((TypeError, ValueError)):
        Bad()(ACTION, OBS)


def test_openenv_style_state_dict_overrides_inside_a_container() -> None:
    class Threshold(Rubric):  # checkpointing written as OpenEnv's rubrics do it
        def __init__(self, threshold: float = 0.5) -> None:
            super().__init__()
            self.threshold = threshold

        def forward(self, action: Any, observation: Any) -> float:
            return 1.0

        def state_dict(self) -> dict[str, Any]:
            return {"threshold": self.threshold}

        def load_state_dict(self, state: dict[str, Any]) -> None:  # type: ignore[override]
            if "threshold" in state:
                self.threshold = state["threshold"]

    source = Sequential(Threshold(0.9), Gate(Threshold(0.1)))
    state = source.state_dict()
    assert state == {
        "rubric_0.threshold": 0.9,
        "rubric_1.threshold": 1.0,
        "rubric_1.rubric.threshold": 0.1,
    }
    target = Sequential(Threshold(), Gate(Threshold()))
    target.load_state_dict(state)
    assert target.state_dict() == state


def test_a_child_named_score_is_allowed() -> None:
    class Outer(Rubric):  # `score` is not a reserved name in OpenEnv
        def __init__(self) -> None:
            super().__init__()
            self.score = Const(0.25)

        def forward(self, action: Any, observation: Any) -> float:
            return self.score(action, observation)

    outer = Outer()
    assert Gate(outer, threshold=0.1)(ACTION, OBS) == 0.25
    assert Rubric.score(outer, ACTION, OBS) == 0.25
    assert [path for path, _ in outer.named_rubrics()] == ["score"]
