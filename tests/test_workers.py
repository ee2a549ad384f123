"""`--workers N`: sessions stay on the process that holds them, whichever process accepts."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest
from websockets.sync.client import connect

from tests.support.server import REPO, free_port, wait_healthy

STEP = {"action": {"type": "call_tool", "tool_name": "echo_message", "arguments": {"message": "x"}}}


@pytest.fixture(scope="module")
def two_workers() -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "echo_env.server.app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "2",
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process)
        yield url
    finally:
        process.terminate()
        process.wait(60)


def _new_http_session(url: str) -> str:
    # A fresh connection per request lets the kernel pick any worker.
    with httpx.Client() as client:
        reply = client.post(f"{url}/reset", headers={"X-OpenEnv-Session-Id": "new"})
    assert reply.status_code == 200
    return reply.json()["session_id"]


def test_http_sessions_follow_their_worker(two_workers: str) -> None:
    # The kernel hashes each connection to a worker; 32 connections all on one of two workers
    # happens once in two billion runs unless balancing is broken.
    sessions = [_new_http_session(two_workers) for _ in range(32)]
    owners = [sid.split(".")[0] for sid in sessions]
    assert set(owners) == {"w0", "w1"}, f"all sessions landed on one worker: {set(owners)}"
    for round_ in range(1, 3):
        for sid in sessions:
            with httpx.Client() as client:
                headers = {"X-OpenEnv-Session-Id": sid}
                assert (
                    client.post(f"{two_workers}/step", json=STEP, headers=headers).status_code
                    == 200
                )
                state = client.get(f"{two_workers}/state", headers=headers).json()
            assert state["step_count"] == round_


def test_websocket_attach_reaches_the_owner(two_workers: str) -> None:
    ws_url = two_workers.replace("http://", "ws://") + "/ws"
    created = []
    stack = contextlib.ExitStack()
    # The kernel hashes each connection to a worker: open connections until both workers hold
    # sessions (32 on one worker happens once in two billion runs unless balancing is broken).
    owners: set[str] = set()
    while len(created) < 32 and (len(created) < 6 or owners != {"w0", "w1"}):
        ws = stack.enter_context(connect(ws_url, subprotocols=["openenv.v1"]))
        hello = json.loads(ws.recv())
        assert hello["type"] == "session"
        ws.send(json.dumps({"type": "step", "id": 1, "data": STEP["action"]}))
        assert json.loads(ws.recv())["id"] == 1
        created.append((ws, hello["data"]["session_id"], hello["data"]["resume_token"]))
        owners.add(hello["data"]["session_id"].split(".")[0])
    assert owners == {"w0", "w1"}, f"all sessions landed on one worker: {owners}"
    for ws, sid, token in created:
        ws.close()
        with connect(
            f"{ws_url}?session_id={sid}",
            subprotocols=["openenv.v1"],
            additional_headers={"X-OpenEnv-Resume-Token": token},
        ) as again:
            hello = json.loads(again.recv())
            assert hello["type"] == "session" and hello["data"]["resumed"] is True
            again.send(json.dumps({"type": "state", "id": 2}))
            reply = json.loads(again.recv())
            assert reply["type"] == "state" and reply["data"]["step_count"] == 1
            again.send(json.dumps({"type": "close"}))
    stack.close()


def test_a_second_server_cannot_share_the_port(two_workers: str) -> None:
    port = two_workers.rsplit(":", 1)[1]
    second = subprocess.run(
        [
            sys.executable,
            "-m",
            "echo_env.server.app",
            "--host",
            "127.0.0.1",
            "--port",
            port,
            "--workers",
            "2",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert second.returncode != 0
    assert "cannot bind" in second.stderr and "another --port" in second.stderr
