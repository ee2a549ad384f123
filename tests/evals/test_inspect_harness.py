"""`InspectAIHarness` (OpenEnv 0.10's) when Inspect gives back no log: a clear RuntimeError,
as 0.10 raises, not an IndexError."""

from __future__ import annotations

from typing import Any

import pytest

inspect_ai = pytest.importorskip("inspect_ai")

from openenv.core.evals import EvalConfig, InspectAIHarness  # noqa: E402


def test_no_log_from_inspect_is_a_runtime_error_naming_the_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[Any, dict[str, Any]]] = []

    def no_logs(task: Any, **kwargs: Any) -> list[Any]:
        calls.append((task, kwargs))
        return []

    monkeypatch.setattr(inspect_ai, "eval", no_logs)
    config = EvalConfig(
        harness_name="inspect_ai",
        harness_version="0.3",
        library_versions={},
        dataset="openenv/openenv_task",
        eval_parameters={"model": "openai-api/local/m", "task_args": {"env": "math"}},
    )
    with pytest.raises(RuntimeError, match="returned no logs") as raised:
        InspectAIHarness(log_dir="unused").run_from_config(config)
    assert not isinstance(raised.value, IndexError)
    assert "'openenv/openenv_task'" in str(raised.value)
    assert "'openai-api/local/m'" in str(raised.value)
    ((task, kwargs),) = calls
    assert task == "openenv/openenv_task"
    assert kwargs["model"] == "openai-api/local/m" and kwargs["log_dir"] == "unused"
