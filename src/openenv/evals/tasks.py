"""The task sets environments ship, read from their installed packages.

The wire protocol has no "list tasks" call, so an evaluation that is not given its tasks asks
the environment's package (when installed here) which it ships. Each is reset with
``task_id=...``, as those environments document.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from openenv.auto.discovery import normalize_env_name

from .base import EvalTask

__all__ = ["known_tasks"]


def _terminal() -> list[EvalTask]:
    tasks = importlib.import_module("terminal_env.tasks")
    loaded = tasks.load_tasks(tasks.task_roots())
    return [
        EvalTask(
            tid,
            {"task_id": tid},
            {"category": task.spec.category, "difficulty": task.spec.difficulty},
        )
        for tid, task in sorted(loaded.items())
    ]


def _repo() -> list[EvalTask]:
    catalog = importlib.import_module("repo_env.tasks").load_catalog()
    return [
        EvalTask(tid, {"task_id": tid}, {"project": task.project})
        for tid, task in sorted(catalog.tasks.items())
    ]


def _coding() -> list[EvalTask]:
    shipped = importlib.import_module("coding_env.tasks").shipped_tasks()
    return [EvalTask(tid, {"task_id": tid}) for tid in sorted(shipped)]


_LOADERS: dict[str, Callable[[], list[EvalTask]]] = {
    "terminal": _terminal,
    "repo": _repo,
    "coding": _coding,
}


def known_tasks(env: str) -> list[EvalTask] | None:
    """The shipped tasks of ``env`` ('terminal', 'repo_env', ...), or None when it does not
    list tasks (math_env and reasoning_gym_env draw them from a seed: pass seeds) or its
    package is not installed here."""
    loader = _LOADERS.get(normalize_env_name(env))
    if loader is None:
        return None
    try:
        return loader()
    except ImportError:
        return None
