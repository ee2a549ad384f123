"""The bench scripts still run end to end (tiny runs; the figures themselves are not checked)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _run(*args: str, timeout: float = 240) -> str:
    proc = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=timeout, cwd=BENCH
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


def test_dispatch_hop_prints_every_way() -> None:
    out = _run("dispatch_hop.py", "--calls", "300", "--callers", "4", "--repeat", "1")
    for way in ("run_in_executor", "one thread", "CallDispatcher"):
        assert way in out


def test_ws_inprocess_steps_every_session_of_our_app_and_the_floor() -> None:
    for app in ("plain_env:app", "floor_app:app"):
        args = ("--sessions", "4", "--steps", "200", "--repeat", "1")
        out = _run("ws_inprocess.py", app, *args)
        assert f"{app}: 4 sessions, " in out and "µs CPU per step" in out


@pytest.mark.timeout(300)
def test_bench_compares_our_plain_env_with_the_floor(tmp_path: Path) -> None:
    report = tmp_path / "bench.json"
    _run(
        "bench.py",
        "--compare",
        "--only",
        "floor,ours-plain",
        "--phases",
        "seq",
        "--duration",
        "0.3",
        "--repeat",
        "1",
        "--json",
        str(report),
    )
    report_data = json.loads(report.read_text())
    for key in ("floor", "ours-plain"):
        seq = report_data["results"][key]["ws_seq"]
        assert seq["ok"] and seq["errors"] == 0 and seq["steps"] > 0, seq
        assert 0 < seq["p50_us"] <= seq["p99_us"]
        # Started servers report their collections during the run, per generation.
        assert sorted(seq["gc"]) == ["0", "1", "2"] and seq["gc"]["2"]["count"] >= 0
    names = [target["name"] for target in report_data["targets"]]
    assert "plain step p50 (sequential WS): ours / floor" in names


def test_client_import_bench_shows_no_server_stack_in_clients() -> None:
    rows = {
        line.split("  ")[0]: line
        for line in _run("client_import.py", "--runs", "1").splitlines()[1:]
    }
    assert rows["typed MCP client (from echo_env import EchoEnv)"].endswith("none")
    assert rows["openenv.core.protocol"].endswith("none")
    assert "fastapi" in rows["server stack (openenv.core.env_server.create_app)"]


@pytest.mark.slow  # servers with megabytes of replies: seconds of two cores
def test_replay_memory_bench_prints_both_budgets() -> None:
    out = _run("replay_memory.py", "--sessions", "2", "--steps", "3", "--size", "100000")
    assert "count window only" in out and "default byte budget" in out


@pytest.mark.slow  # floods two cores for a few seconds per kind
@pytest.mark.timeout(300)
def test_fairness_bench_prints_every_flood() -> None:
    out = _run("fairness.py", "--quick")
    for kind in ("unloaded", "invalid", "huge", "no-read"):
        assert kind in out
    assert "p99 x" in out


@pytest.mark.slow  # with the full soak in tests/soak: a quick run still takes 20 s of two cores
@pytest.mark.timeout(300)
def test_soak_quick_run_finds_no_problem_and_prints_its_figures(tmp_path: Path) -> None:
    report = tmp_path / "soak.json"
    out = _run("soak.py", "--quick", "--json", str(report))
    assert "no problems" in out and "sessions by kind" in out
    data = json.loads(report.read_text())
    assert data["problems"] == [] and len(data["cycles"]) == 2
    for cycle in data["cycles"]:
        assert cycle["steps"] > 0 and cycle["server"]["sessions"] == 0, cycle


@pytest.mark.slow  # three servers and a load client: seconds of two cores
@pytest.mark.timeout(300)
def test_metrics_overhead_bench_compares_off_and_on(tmp_path: Path) -> None:
    report = tmp_path / "overhead.json"
    out = _run(
        "metrics_overhead.py",
        *("--variants", "off,off-again,on", "--duration", "0.3", "--rounds", "1"),
        *("--sessions", "2", "--json", str(report)),
    )
    assert "throughput vs off" in out
    variants = {v["variant"]: v for v in json.loads(report.read_text())["variants"]}
    assert variants["off"]["throughput_ratio"] == 1.0
    assert variants["on"]["steps_counted_by_metrics"] > 0  # the `on` server really counted
    assert variants["off-again"]["steps_counted_by_metrics"] is None


@pytest.mark.slow  # starts two echo servers and a few dozen sessions
def test_fleet_bench_prints_every_row(tmp_path: Path) -> None:
    report = tmp_path / "fleet.json"
    out = _run(
        "fleet.py", "--sessions", "12", "--servers", "2", "--steps", "2", "--json", str(report)
    )
    assert "OpenEnv tutorial" in out and "fleet / direct" in out
    rows = {row["name"]: row for row in json.loads(report.read_text())["rows"]}
    assert set(rows) == {"fleet", "direct, same servers", "direct, one server"}
    assert all(row["errors"] == 0 and row["steps"] == 24 for row in rows.values())


@pytest.mark.slow  # starts the Atari server and emulates a few hundred frames per row
def test_atari_frames_bench_prints_direct_beside_served(tmp_path: Path) -> None:
    report = tmp_path / "atari.json"
    out = _run("atari_frames.py", "--duration", "0.3", "--sessions", "1,2", "--emulators",
               "default,1", "--json", str(report))  # fmt: skip
    assert "| direct |" in out and "served, binary" in out and "emulators=1" in out
    rows = json.loads(report.read_text())
    assert {(r["sessions"], r["form"], r["emulators"]) for r in rows} == {
        (n, form, setting)
        for n in (1, 2)
        for form in ("json", "binary", "list")
        for setting in ("default", "1")
    }
    assert all(r["steps_per_s"] > 0 and r["direct_steps_per_s"] > 0 for r in rows)
    # the emulator process's CPU is counted (and shown apart; binary rows step enough for the
    # 10 ms clock ticks); none without one
    assert all(
        r["emulator_cpu_us"] > 0 for r in rows if r["form"] == "binary" and r["emulators"] == "1"
    )
    assert all(r["emulator_cpu_us"] == 0 for r in rows if r["emulators"] == "default")


@pytest.mark.slow  # five servers, the Atari server and a dozen server starts: minutes of two cores
@pytest.mark.timeout(900)
def test_perf_report_quick_run_writes_a_table_per_item(tmp_path: Path) -> None:
    tables, report = tmp_path / "report.md", tmp_path / "report.json"
    out = _run(
        "perf_report.py", "--quick", "--markdown", str(tables), "--json", str(report), timeout=880
    )
    assert "Item 1" in out and "load average" in out
    text = tables.read_text()
    titles = ("Item 1", "Item 2", "Item 3", "Memory per idle session", "Item 4", "Item 5")
    for title in (*titles, "Figures the top-level README states"):
        assert f"#### {title}" in text
    assert "| figure | ours | OpenEnv 0.10 | floor | target | result |" in text
    sections = {s["key"]: s for s in json.loads(report.read_text())["sections"]}
    assert set(sections) == {"item1", "item2", "item3", "memory", "item4", "item5", "readme"}
    # Every server answered: ours, OpenEnv 0.10's and the floor's figures are all there.
    first = sections["item1"]["rows"][0]
    assert "-" not in (first["ours"], first["openenv"], first["floor"]), first
    # Each item states its target and a verdict (figures from a quick run are not checked).
    for key in ("item1", "item2", "item3", "memory", "item4", "item5"):
        assert any(row["met"] is not None for row in sections[key]["rows"]), key


def test_perf_report_reads_the_claims_it_checks_from_the_readme(tmp_path: Path) -> None:
    sys.path.insert(0, str(BENCH))
    try:
        import perf_report
    finally:
        sys.path.remove(str(BENCH))
    claims = perf_report.readme_claims()
    assert set(claims) == {"local", "sandbox", "client_import"}, claims
    assert all(value[0].isdigit() for value in claims.values()), claims
    # A README whose figures changed is read as it is now, not as a copy in the script.
    readme = tmp_path / "README.md"
    readme.write_text(
        '| `from_env("echo")` to the first step: local fork / bubblewrap sandbox (p50) '
        "| 12 / 34 ms | |\n| `from echo_env import EchoEnv` (imports) | 0.25 s | |\n"
    )
    assert perf_report.readme_claims(readme) == {
        "local": "12 ms",
        "sandbox": "34 ms",
        "client_import": "0.25 s",
    }
