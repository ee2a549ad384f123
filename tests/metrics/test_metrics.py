"""`/metrics`: real servers, real WebSocket episodes, then a scrape of what they counted."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from websockets.sync.client import ClientConnection, connect

from openenv.core.protocol import RESUME_TOKEN_HEADER, SESSION_HEADER, SUBPROTOCOL
from tests.apps.metered import API_KEY
from tests.support.server import REPO, serve

APP = "tests.apps.metered"
#: Long enough for a loaded machine; only a reaper that never runs exceeds it.
WAIT_S = 30.0

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str, headers: dict[str, str] | None = None) -> Samples:
    reply = httpx.get(f"{url}/metrics", headers=headers)
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("text/plain")
    samples: Samples = {}
    for family in text_string_to_metric_families(reply.text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def wait_for(url: str, check: Callable[[Samples], bool]) -> Samples:
    """Scrape until `check` holds (the reaper and closes run on their own schedule)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        samples = scrape(url)
        if check(samples) or time.monotonic() > deadline:
            return samples
        time.sleep(0.05)


def call(ws: ClientConnection, kind: str, data: Any = None, **extra: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"type": kind, **extra}
    if data is not None:
        message["data"] = data
    ws.send(json.dumps(message))
    return json.loads(ws.recv())


def test_an_episode_moves_the_counters_and_histograms() -> None:
    with serve(f"{APP}:app") as server:
        with connect(server.ws_url) as ws:
            assert call(ws, "reset", {"seed": 3})["type"] == "observation"
            for amount in (1, 2):
                assert call(ws, "step", {"amount": amount})["type"] == "observation"
            failed = call(ws, "step", {"amount": 13})  # the counter's step raises
            assert failed["data"]["code"] == "EXECUTION_ERROR"
            invalid = call(ws, "step", {"amount": "many"})
            assert invalid["data"]["code"] == "VALIDATION_ERROR"
            ws.send("{not json")
            assert json.loads(ws.recv())["data"]["code"] == "INVALID_JSON"
            live = scrape(server.url)
        closed = wait_for(
            server.url, lambda s: value(s, "openenv_sessions_active", transport="ws") == 0
        )

    assert value(live, "openenv_sessions_active", transport="ws") == 1
    assert value(live, "openenv_sessions_opened_total", transport="ws") == 1
    assert value(live, "openenv_resets_total", outcome="ok") == 1
    assert value(live, "openenv_steps_total", outcome="ok") == 2
    assert value(live, "openenv_steps_total", outcome="error") == 1
    errors = {
        ("EXECUTION_ERROR", "environment"): 1,
        ("VALIDATION_ERROR", "client"): 1,
        ("INVALID_JSON", "client"): 1,
    }
    for (code, category), count in errors.items():
        assert value(live, "openenv_errors_total", code=code, category=category) == count
    # Every step request is timed; only those that reached the environment split its time off.
    assert value(live, "openenv_request_duration_seconds_count", kind="step") == 4
    assert value(live, "openenv_env_call_duration_seconds_count", kind="step") == 2
    assert value(live, "openenv_protocol_overhead_seconds_total", kind="step") > 0
    assert value(live, "openenv_env_call_duration_seconds_count", kind="reset") == 1
    request_sum = value(live, "openenv_request_duration_seconds_sum", kind="reset")
    env_sum = value(live, "openenv_env_call_duration_seconds_sum", kind="reset")
    overhead_sum = value(live, "openenv_protocol_overhead_seconds_total", kind="reset")
    assert 0 < env_sum <= request_sum
    assert overhead_sum == pytest.approx(request_sum - env_sum, abs=1e-9)
    assert value(live, "openenv_request_duration_seconds_bucket", kind="step", le="+Inf") == 4
    assert value(closed, "openenv_sessions_active", transport="ws") == 0


def test_a_session_over_capacity_is_counted_as_refused() -> None:
    with serve(f"{APP}:app") as server:
        with connect(server.ws_url) as first, connect(server.ws_url) as second:
            for ws in (first, second):
                assert call(ws, "reset")["type"] == "observation"
            with connect(server.ws_url) as third:
                refused = json.loads(third.recv())
            assert refused["data"]["code"] == "CAPACITY_REACHED"
            samples = scrape(server.url)
    assert value(samples, "openenv_sessions_refused_total", reason="capacity") == 1
    assert (
        value(samples, "openenv_errors_total", code="CAPACITY_REACHED", category="infrastructure")
        == 1
    )
    assert value(samples, "openenv_sessions_active", transport="ws") == 2


def test_a_session_waiting_for_a_slot_is_counted_as_queued() -> None:
    with serve(f"{APP}:queue_app") as server:
        with connect(server.ws_url) as first:
            assert call(first, "reset")["type"] == "observation"
            with connect(server.ws_url) as second:
                queued = wait_for(server.url, lambda s: value(s, "openenv_sessions_queued") == 1)
                first.close()  # its slot passes to the waiting connection
                assert call(second, "reset")["type"] == "observation"
                served = scrape(server.url)
    assert value(queued, "openenv_sessions_queued") == 1
    assert value(served, "openenv_sessions_queued") == 0
    assert value(served, "openenv_sessions_opened_total", transport="ws") == 2
    assert value(served, "openenv_sessions_refused_total", reason="capacity") == 0


def test_resumed_sessions_and_replay_cache_bytes() -> None:
    with serve(f"{APP}:app") as server:
        with connect(server.ws_url, subprotocols=[SUBPROTOCOL]) as ws:  # type: ignore[list-item]
            announced = json.loads(ws.recv())["data"]
            assert call(ws, "reset", id="r1")["type"] == "observation"
            assert call(ws, "step", {"amount": 2}, id="s1")["type"] == "observation"
        kept = scrape(server.url)
        headers = {
            SESSION_HEADER: announced["session_id"],
            RESUME_TOKEN_HEADER: announced["resume_token"],
        }
        with connect(
            server.ws_url,
            subprotocols=[SUBPROTOCOL],  # type: ignore[list-item]
            additional_headers=headers,
        ) as ws:
            assert json.loads(ws.recv())["data"]["resumed"] is True
            assert call(ws, "step", {"amount": 2}, id="s2")["type"] == "observation"
            resumed = scrape(server.url)
            ws.send(json.dumps({"type": "close"}))
        gone = wait_for(server.url, lambda s: value(s, "openenv_replay_cache_bytes") == 0)
    assert value(kept, "openenv_replay_cache_bytes") > 0
    assert value(resumed, "openenv_sessions_resumed_total") == 1
    assert value(resumed, "openenv_replay_cache_bytes") > value(kept, "openenv_replay_cache_bytes")
    assert value(resumed, "openenv_sessions_opened_total", transport="ws") == 1
    assert value(gone, "openenv_replay_cache_bytes") == 0
    assert value(gone, "openenv_sessions_active", transport="ws") == 0


def test_idle_sessions_are_counted_as_reaped() -> None:
    with serve(f"{APP}:reaping_app") as server:
        with connect(server.ws_url) as ws:
            assert call(ws, "reset")["type"] == "observation"
            samples = wait_for(
                server.url, lambda s: value(s, "openenv_sessions_reaped_total", reason="idle") > 0
            )
    assert value(samples, "openenv_sessions_reaped_total", reason="idle") == 1
    assert value(samples, "openenv_sessions_active", transport="ws") == 0


def test_dropped_resumable_sessions_are_reaped_after_the_grace_period() -> None:
    with serve(f"{APP}:grace_app") as server:
        with connect(server.ws_url, subprotocols=[SUBPROTOCOL]) as ws:  # type: ignore[list-item]
            json.loads(ws.recv())
            assert call(ws, "reset")["type"] == "observation"
        samples = wait_for(
            server.url,
            lambda s: value(s, "openenv_sessions_reaped_total", reason="resume_grace") > 0,
        )
    assert value(samples, "openenv_sessions_reaped_total", reason="resume_grace") == 1
    assert value(samples, "openenv_sessions_reaped_total", reason="idle") == 0


def test_http_steps_and_errors_are_counted() -> None:
    with serve(f"{APP}:app") as server, httpx.Client(base_url=server.url) as http:
        opened = http.post("/reset", headers={SESSION_HEADER: "new"})
        sid = opened.json()["session_id"]
        headers = {SESSION_HEADER: sid}
        assert http.post("/step", json={"action": {"amount": 1}}, headers=headers).is_success
        assert http.post("/step", json={"action": {"amount": "x"}}, headers=headers).status_code
        unknown = http.post("/step", json={"action": {"amount": 1}}, headers={SESSION_HEADER: "x"})
        assert unknown.status_code == 404
        assert http.post("/reset").is_success  # stateless: a throwaway environment
        samples = scrape(server.url)
    assert value(samples, "openenv_sessions_opened_total", transport="http") == 1
    assert value(samples, "openenv_sessions_active", transport="http") == 1
    assert value(samples, "openenv_resets_total", outcome="ok") == 2
    assert value(samples, "openenv_steps_total", outcome="ok") == 1
    assert value(samples, "openenv_errors_total", code="VALIDATION_ERROR", category="client") == 1
    lost = {"code": "SESSION_NOT_FOUND", "category": "infrastructure"}
    assert value(samples, "openenv_errors_total", **lost) == 1


def test_metrics_need_the_api_key_unless_made_public() -> None:
    auth = {"Authorization": f"Bearer {API_KEY}"}
    with serve(f"{APP}:keyed_app") as server:
        assert httpx.get(f"{server.url}/metrics").status_code == 401
        assert "openenv_steps_total" in httpx.get(f"{server.url}/metrics", headers=auth).text
    with serve(f"{APP}:public_app") as server:
        assert httpx.get(f"{server.url}/metrics").status_code == 200
        assert httpx.post(f"{server.url}/reset").status_code == 401  # only /metrics is open


def test_metrics_are_on_by_default() -> None:
    with serve("tests.apps.counter:app") as server:
        httpx.post(f"{server.url}/reset")
        reply = httpx.get(f"{server.url}/metrics")
    assert reply.status_code == 200
    assert "openenv_resets_total" in reply.text


def test_metrics_off_serve_nothing_and_import_nothing() -> None:
    with serve("tests.apps.counter:app", env={"OPENENV_METRICS": "0"}) as server:
        assert httpx.get(f"{server.url}/metrics").status_code == 404
    probe = (
        "import sys\n"
        "from starlette.testclient import TestClient\n"
        "from tests.apps.counter import app\n"
        "with TestClient(app) as client:\n"
        "    client.post('/reset')\n"
        "    client.post('/step', json={'action': {'amount': 1}})\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('prometheus_client'))\n"
        "assert not loaded, loaded\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "OPENENV_METRICS": "0"}
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


def test_traces_name_sessions_by_digest_only() -> None:
    sdk = pytest.importorskip("opentelemetry.sdk.trace", reason="openenv[otel] not installed")
    from opentelemetry import trace
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from openenv.core.protocol import session_log_id

    exporter = InMemorySpanExporter()
    provider = sdk.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)  # once per process; later calls are ignored
    if trace.get_tracer_provider() is not provider:
        pytest.skip("another test set the process's tracer provider first")
    with serve(f"{APP}:traced_app") as server:
        with connect(server.ws_url, subprotocols=[SUBPROTOCOL]) as ws:  # type: ignore[list-item]
            sid = json.loads(ws.recv())["data"]["session_id"]
            call(ws, "reset")
            call(ws, "step", {"amount": 1})
            call(ws, "step", {"amount": 13})
    spans = [s for s in exporter.get_finished_spans() if s.name.startswith("openenv.")]
    assert [s.name for s in spans] == ["openenv.reset", "openenv.step", "openenv.step"]
    for span in spans:
        assert span.attributes is not None
        assert span.attributes["openenv.session"] == session_log_id(sid)
        assert sid not in json.dumps(dict(span.attributes))
    assert spans[-1].status.status_code.name == "ERROR"  # the step that raised
