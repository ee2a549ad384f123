"""The soak and chaos suite (issue point 6): thousands of sessions with faults, several cycles.

Three cycles of 40 s with 200 sessions at once (several thousand sessions in all) against the
soak environment in its own process: clean episodes, connections cut with steps in flight and
sessions resumed (raw frames and the real client), abandoned sessions, malformed frames, slow
readers and hung calls. Each cycle must lose and double no acknowledged step, leave no session
open, and keep the server's threads, file descriptors and RSS within `SoakLimits` of cycle 1;
the server must be healthy at the end. Its figures are printed (`pytest -s`, or on failure).
"""

from __future__ import annotations

import asyncio

import pytest

from openenv.testing.soak import run_soak
from tests.soak.server import soak_config, soak_limits, soak_server

MALFORMED_CODES = {"INVALID_JSON", "UNKNOWN_TYPE", "VALIDATION_ERROR", "MESSAGE_TOO_LARGE"}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_soak_and_chaos_cycles_leave_the_server_as_they_found_it() -> None:
    config = soak_config(concurrency=200, duration_s=40.0, cycles=3)
    with soak_server() as server:
        assert server.process is not None
        report = asyncio.run(run_soak(server.url, server.process.pid, config, soak_limits()))
    summary = report.summary()
    print(summary)
    assert not report.problems(), summary
    # The faults really happened: every kind of session, resumes, every malformed frame's error.
    assert report.sessions >= 2000, summary
    played = {kind for kind, weight in config.weights.items() if weight > 0}
    for cycle in report.cycles:
        assert set(cycle.sessions) == played, summary
        assert cycle.resumes > 0 and MALFORMED_CODES <= set(cycle.errors), summary
