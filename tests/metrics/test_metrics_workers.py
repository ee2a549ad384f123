"""`/metrics` under `--workers 2`: whichever worker answers the scrape reports all of them
(it asks the other over its Unix socket, with the scrape's API key)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from websockets.sync.client import connect

from tests.apps.metered import API_KEY
from tests.metrics.test_metrics import Samples, value
from tests.support.server import REPO, free_port, stop_process, wait_healthy

AUTH = {"Authorization": f"Bearer {API_KEY}"}
STEP = {"type": "call_tool", "tool_name": "echo_message", "arguments": {"message": "x"}}


def _scrape_fresh_connection(url: str) -> Samples:
    from prometheus_client.parser import text_string_to_metric_families

    with httpx.Client(headers=AUTH) as client:  # a new connection: the kernel picks a worker
        assert client.get(f"{url}/metrics", headers={"Authorization": ""}).status_code == 401
        reply = client.get(f"{url}/metrics")
    assert reply.status_code == 200
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(reply.text)
        for s in family.samples
    }


@pytest.mark.slow
def test_workers_add_up_and_leave_no_files(tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "OPENENV_METRICS": "1",
        "OPENENV_API_KEY": API_KEY,
        "TMPDIR": str(tmp_path),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "echo_env.server.app", "--host", "127.0.0.1", "--port", str(port),
         "--workers", "2"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    steps = 0
    try:
        wait_healthy(url, process)
        with contextlib.ExitStack() as stack:
            owners: dict[str, int] = {}
            # The kernel hashes each connection to a worker; 32 on one of two happens once in
            # two billion runs unless balancing is broken.
            while len(owners) < 2 and sum(owners.values()) < 32:
                ws = stack.enter_context(
                    connect(
                        url.replace("http", "ws") + "/ws",
                        subprotocols=["openenv.v1"],  # type: ignore[list-item]
                        additional_headers=AUTH,
                    )
                )
                sid = json.loads(ws.recv())["data"]["session_id"]
                owner = sid.split(".")[0]
                owners[owner] = owners.get(owner, 0) + 1
                for _ in range(owners[owner]):  # uneven counts per worker
                    ws.send(json.dumps({"type": "step", "data": STEP}))
                    assert json.loads(ws.recv())["type"] == "observation"
                    steps += 1
            assert set(owners) == {"w0", "w1"}, f"all sessions landed on one worker: {owners}"
            sessions = sum(owners.values())
            for _ in range(6):
                samples = _scrape_fresh_connection(url)
                done = value(samples, "openenv_steps_total", outcome="ok") + value(
                    samples, "openenv_steps_total", outcome="done"
                )
                assert done == steps
                assert value(samples, "openenv_sessions_opened_total", transport="ws") == sessions
                assert value(samples, "openenv_sessions_active", transport="ws") == sessions
                assert (
                    value(samples, "openenv_env_call_duration_seconds_count", kind="step") == steps
                )
                assert value(samples, "openenv_workers_reporting") == 2
    finally:
        stop_process(process)
    assert not list(tmp_path.glob("openenv-workers-*")), "the workers' sockets outlived the server"
