"""Run inside a container of the image (`bench/providers_docker.py --inside`): start the image's
own command as a child, as the container would, and time it from its start to `/health` and to
the reply of a first reset + echo step, with the server's CPU seconds. No engine in the way:
what is left of a start once the container runs. Prints one JSON object.

Uses only the standard library and `websockets` (which every image's uvicorn has). The step is
the echo environment's unless `$BENCH_STEP` holds another action (JSON), or is empty: the
first reset only."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

from websockets.sync.client import connect

PORT = 8000
RESET = json.dumps({"type": "reset", "data": {}})
ECHO_STEP = {"type": "call_tool", "tool_name": "echo_message", "arguments": {"message": "hi"}}


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def healthy() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", PORT), timeout=1) as conn:
            conn.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            return b" 200 " in conn.recv(64)
    except OSError:
        return False


def main() -> None:
    command = sys.argv[1:]
    action = os.environ.get("BENCH_STEP")
    step = json.loads(action) if action else (ECHO_STEP if action is None else None)
    t0 = time.perf_counter()
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not healthy():
        if server.poll() is not None:
            raise SystemExit(f"the server exited with {server.returncode}")
        time.sleep(0.002)
    t_health, cpu_health = time.perf_counter(), cpu_seconds(server.pid)
    with connect(f"ws://127.0.0.1:{PORT}/ws", max_size=None, proxy=None) as ws:
        ws.send(RESET)
        assert '"type":"error"' not in str(ws.recv()).replace(" ", "")
        if step is not None:
            ws.send(json.dumps({"type": "step", "data": step}))
            assert '"type":"error"' not in str(ws.recv()).replace(" ", "")
    t_step, cpu_step = time.perf_counter(), cpu_seconds(server.pid)
    server.terminate()
    server.wait()
    print(
        json.dumps(
            {
                "health_s": t_health - t0,
                "first_step_s": t_step - t0,
                "server_cpu_health_s": cpu_health,
                "server_cpu_step_s": cpu_step,
            }
        )
    )


if __name__ == "__main__":
    main()
