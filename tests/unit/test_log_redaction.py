"""Session ids never reach the server's logs (a real server, its real uvicorn log lines)."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx

from openenv.core.protocol import redact_session_ids, session_log_id
from tests.support.server import PYCACHE_ENV, REPO, free_port, stop_process, wait_healthy


def test_redaction_keeps_lines_matchable_and_drops_the_id() -> None:
    sid = "0f8fad5b-d9cb-469f-a165-70867728950e"
    line = f"GET /state?session_id={sid} HTTP/1.1 and DELETE /sessions/{sid}"
    redacted = redact_session_ids(line)
    assert sid not in redacted
    assert redacted.count(session_log_id(sid)) == 2


def test_server_logs_carry_no_session_id() -> None:
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "echo_env.server.app", "--port", str(port)],
        cwd=REPO,
        env={**os.environ, **PYCACHE_ENV, "OPENENV_LOG_LEVEL": "info"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, server)
        with httpx.Client(base_url=url, trust_env=False) as http:
            reply = http.post("/reset", json={}, headers={"X-OpenEnv-Session-Id": "new"})
            sid = reply.json()["session_id"]
            http.get("/state", params={"session_id": sid})
            http.delete(f"/sessions/{sid}")
    finally:
        stop_process(server)
    output = server.stdout.read() if server.stdout else ""
    assert "/sessions/" in output and "session_id=" in output  # the lines are there ...
    assert sid not in output  # ... without the id
    assert session_log_id(sid) in output
