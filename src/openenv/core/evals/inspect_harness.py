"""`InspectAIHarness`: an Inspect AI task, by name or file, run as an `EvalHarness`.

``inspect-ai`` is imported only by `run` (the ``evals`` extra installs it), so this module
imports without it. With ``task="openenv/openenv_task"`` and ``task_args`` (``env``, ``tasks``,
``base_url``) it evaluates a served environment (`openenv.evals.inspect`).
"""

from __future__ import annotations

from typing import Any

from .base import EvalHarness

__all__ = ["InspectAIHarness"]

#: eval_parameters passed to `inspect_ai.eval` unchanged when given (not None).
_PASSED_THROUGH = (
    "max_samples",
    "max_connections",
    "temperature",
    "max_tokens",
    "epochs",
    "solver",
)


class InspectAIHarness(EvalHarness):
    """Runs ``inspect_ai.eval``. eval_parameters: ``model`` (required, e.g.
    ``"openai-api/local/my-model"``), ``model_base_url``, ``model_args``, ``task`` (default:
    the dataset), ``task_args``, and ``max_samples``, ``max_connections``, ``temperature``,
    ``max_tokens``, ``epochs``, ``solver``, ``scorer`` (with a `Task` object). Logs go to
    ``log_dir`` (Inspect's default when None)."""

    def __init__(self, *, log_dir: str | None = None, save_results: bool = False) -> None:
        self.log_dir = log_dir
        self.save_results = save_results

    def run(
        self,
        harness_version: str,
        library_versions: dict[str, str],
        dataset: str,
        eval_parameters: dict[str, Any],
    ) -> dict[str, Any]:
        """Metric name to value, from the first log's scorers. RuntimeError (as OpenEnv 0.10
        raises) when Inspect returned no log, or unless the log's status is ``success``."""
        try:
            from inspect_ai import eval as inspect_eval
        except ImportError as exc:
            raise ImportError(
                "InspectAIHarness needs inspect-ai: pip install 'openenv[evals]'"
            ) from exc
        model = eval_parameters.get("model")
        if not model:
            raise ValueError("eval_parameters needs 'model' (e.g. 'openai-api/local/my-model')")
        options: dict[str, Any] = {
            key: eval_parameters[key]
            for key in _PASSED_THROUGH
            if eval_parameters.get(key) is not None
        }
        if eval_parameters.get("task_args"):
            options["task_args"] = eval_parameters["task_args"]
        if eval_parameters.get("model_args"):
            options["model_args"] = eval_parameters["model_args"]
        if eval_parameters.get("model_base_url"):
            options["model_base_url"] = eval_parameters["model_base_url"]
        if self.log_dir is not None:
            options["log_dir"] = self.log_dir
        task = eval_parameters.get("task") or dataset
        if eval_parameters.get("scorer") is not None:
            # `inspect_ai.eval` takes no scorer: put it on the task itself.
            from inspect_ai import Task, task_with

            if not isinstance(task, Task):
                raise ValueError("a 'scorer' override needs 'task' to be an inspect_ai Task")
            task = task_with(task, scorer=eval_parameters["scorer"])
        logs = inspect_eval(task, model=model, **options)
        if not logs:
            name = task if isinstance(task, str) else getattr(task, "name", type(task).__name__)
            raise RuntimeError(
                f"Inspect AI evaluation of {name!r} with model {model!r} returned no logs: "
                "check that the task and model arguments are valid"
            )
        log = logs[0]
        if log.status != "success":
            detail = f": {log.error.message}" if log.error is not None else ""
            raise RuntimeError(f"Inspect AI evaluation ended with status {log.status!r}{detail}")
        return _flat_metrics(log)


def _flat_metrics(log: Any) -> dict[str, Any]:
    scores: dict[str, Any] = {}
    if log.results is None:
        return scores
    for score in log.results.scores:
        for name, metric in score.metrics.items():
            scores[name] = metric.value
    return scores
