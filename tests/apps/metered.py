"""The counter environment served with /metrics on, in the configurations the metrics tests
need. Each app is built when asked for (`tests.apps.metered:grace_app`), not all on import."""

from __future__ import annotations

from typing import Any

from openenv.core.env_server import create_app
from tests.apps.counter import CounterAction, CounterEnv, CounterObservation

API_KEY = "metrics-test-key"

_OPTIONS: dict[str, dict[str, Any]] = {
    # Two slots and no queue: a third session is refused at once.
    "app": {"metrics": True, "max_concurrent_envs": 2, "queue_timeout_s": 0},
    # One slot; a second session waits for it.
    "queue_app": {"metrics": True, "max_concurrent_envs": 1, "queue_timeout_s": 60},
    # The reaper ends idle sessions within a second.
    "reaping_app": {"metrics": True, "session_timeout": 0.3},
    # No idle timeout; a dropped resumable session is ended after 0.3 s.
    "grace_app": {"metrics": True, "session_timeout": 0, "resume_grace_s": 0.3},
    # /metrics behind the API key, or open.
    "keyed_app": {"metrics": True, "api_key": API_KEY},
    "public_app": {"metrics": True, "api_key": API_KEY, "metrics_public": True},
    "traced_app": {"tracing": True},
}


def __getattr__(name: str) -> Any:
    if name not in _OPTIONS:
        raise AttributeError(name)
    return create_app(
        CounterEnv, CounterAction, CounterObservation, env_name="counter_env", **_OPTIONS[name]
    )
