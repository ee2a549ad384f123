"""The soak driver's checks flag what they exist for (so a green soak means something)."""

from __future__ import annotations

import asyncio
import random

from openenv.testing.soak import (
    CycleResult,
    ServerSample,
    SoakConfig,
    SoakLimits,
    SoakReport,
    _check_growth,
    _Cycle,
)

check = _Cycle.check_tags


def test_applied_steps_are_compared_with_the_acknowledged_ones() -> None:
    assert check("s", ["0", "1", "2"], ["0", "1", "2"], []) == []
    assert check("s", ["0", "2"], ["0", "2"], ["1"]) == []  # unacknowledged, never applied
    assert check("s", ["0", "1"], ["0"], ["1"]) == []  # unacknowledged, applied once
    lost, doubled, twice_unacked, unknown, disordered = (
        check("s", ["0"], ["0", "1"], []),
        check("s", ["0", "1", "1"], ["0", "1"], []),
        check("s", ["0", "1", "1"], ["0"], ["1"]),
        check("s", ["0", "7"], ["0"], []),
        check("s", ["1", "0"], ["0", "1"], []),
    )
    assert lost == ["s: acknowledged step 1 applied 0 times"]
    assert doubled[0] == "s: acknowledged step 1 applied 2 times"
    assert twice_unacked[0] == "s: unacknowledged step 1 applied 2 times"
    assert unknown == ["s: steps never sent were applied: ['7']"]
    assert disordered == ["s: steps applied out of order: ['1', '0']"]


def test_growth_after_the_first_cycle_is_bounded() -> None:
    limits = SoakLimits(
        heap_growth=0.1, heap_slack_blocks=1000, rss_growth=0.25, rss_slack_mb=16,
        fd_slack=16, thread_slack=8,
    )  # fmt: skip
    report = SoakReport(SoakConfig(), limits, ServerSample(90, 15, 6, 0, 50_000))
    first = CycleResult(1, sample=ServerSample(100, 16, 22, 0, 100_000))
    _check_growth(report, first, limits)
    report.cycles.append(first)
    within = CycleResult(2, sample=ServerSample(125, 32, 30, 0, 110_000))
    _check_growth(report, within, limits)
    assert within.problems == []
    beyond = CycleResult(3, sample=ServerSample(126, 33, 31, 0, 110_001))
    _check_growth(report, beyond, limits)
    assert len(beyond.problems) == 4, beyond.problems
    assert "Python heap 110001 blocks" in beyond.problems[0]


def test_threads_may_fill_the_servers_pool_after_a_short_first_cycle() -> None:
    # A quick run's first cycle used 7 of the 16 pool threads; the second filled the pool. That
    # is the pool's design (threads retire after idling), not a leak; beyond a full pool is.
    limits = SoakLimits(thread_slack=2, pool_threads=16)
    report = SoakReport(SoakConfig(), limits, ServerSample(60, 15, 6, 0))
    report.cycles.append(CycleResult(1, sample=ServerSample(62, 16, 13, 0)))
    filled = CycleResult(2, sample=ServerSample(63, 16, 24, 0))
    _check_growth(report, filled, limits)
    assert filled.problems == []
    leaked = CycleResult(3, sample=ServerSample(63, 16, 25, 0))
    _check_growth(report, leaked, limits)
    assert leaked.problems == ["25 threads (cycle 1: 13; start 6 + a full pool of 16)"]
    unbounded = SoakLimits(thread_slack=2)  # no pool given: cycle 1 is the baseline
    later = CycleResult(2, sample=ServerSample(63, 16, 16, 0))
    _check_growth(report, later, unbounded)
    assert later.problems == ["16 threads (cycle 1: 13; start 6 + a full pool of 0)"]


def test_heap_is_not_checked_when_the_app_does_not_serve_it() -> None:
    limits = SoakLimits()
    report = SoakReport(SoakConfig(), limits, ServerSample(90, 15, 6, 0))
    report.cycles.append(CycleResult(1, sample=ServerSample(100, 16, 22, 0)))
    later = CycleResult(2, sample=ServerSample(100, 16, 22, 0))
    _check_growth(report, later, limits)
    assert later.problems == []


async def _http_server(answers: list[bool]) -> tuple[asyncio.Server, str]:
    """A real HTTP/1.1 server on loopback: for each connection in turn, `answers` says whether it
    replies 200 or closes once the request is read (a keep-alive connection closed under the
    client, as an idle timeout does)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        await reader.readexactly(length)
        if answers.pop(0) if answers else False:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}"


async def test_a_gate_release_on_a_closed_connection_is_sent_again() -> None:
    server, url = await _http_server([False, True])
    async with server:
        cycle = _Cycle(url, SoakConfig(), 1, random.Random(0))
        cycle.gates.add("g")
        await cycle.release("g")
        await cycle.http.aclose()
    assert cycle.result.problems == []
    assert cycle.gates == set()


async def test_a_gate_release_that_keeps_failing_is_a_problem() -> None:
    server, url = await _http_server([False, False, False])
    async with server:
        cycle = _Cycle(url, SoakConfig(), 1, random.Random(0))
        await cycle.release("g")
        await cycle.http.aclose()
    assert len(cycle.result.problems) == 1
    assert cycle.result.problems[0].startswith("release of a gate failed:")
