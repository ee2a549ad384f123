"""The counter environment served with /metrics on, in the configurations the metrics tests
need: two slots and no queue (a third session is refused), short idle and resume timeouts (the
reaper ends sessions within a second), and an API key with /metrics behind it or open."""

from __future__ import annotations

from openenv.core.env_server import create_app
from tests.apps.counter import CounterAction, CounterEnv, CounterObservation

API_KEY = "metrics-test-key"


def _app(**options: object):  # type: ignore[no-untyped-def]
    return create_app(
        CounterEnv, CounterAction, CounterObservation, env_name="counter_env", **options
    )


app = _app(metrics=True, max_concurrent_envs=2, queue_timeout_s=0)
reaping_app = _app(metrics=True, session_timeout=0.3, resume_grace_s=0.3)
keyed_app = _app(metrics=True, api_key=API_KEY)
public_app = _app(metrics=True, api_key=API_KEY, metrics_public=True)
