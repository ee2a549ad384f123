#!/usr/bin/env python
"""Issue 18 in one command: every performance target, side by side with OpenEnv 0.10 and the floor.

    .venv/bin/python bench/perf_report.py                        # the full report (~15 minutes)
    .venv/bin/python bench/perf_report.py --quick                # a short run: rough figures
    .venv/bin/python bench/perf_report.py --json r.json --markdown r.md

It runs the measurements of the other scripts (imported, so the figures mean what they mean
there) and prints one table per item of issue 18, each with ours, OpenEnv 0.10 where it has the
same thing, the floor, the target and whether it is met:

1. server CPU per MCP tool-call step against a plain step (`bench.py`: ours-echo, ours-plain,
   openenv-echo, openenv-plain, floor; the server pinned to one core, rounds interleaved);
2. 1 -> 1,024 sessions: CPU growth, p99, full garbage collections (the same `bench.py` run);
3. the plain env against the bare-WebSocket floor (sequential p50, CPU per step at 64);
4. Atari direct (in process) against served (`atari_frames.py`);
5. server start to the first 200 on `/health` with and without bytecode (`server_start.py`),
   OpenEnv 0.10's server started the same way, and memory per idle session (`bench.py`);

and the figures the top-level README states (`providers.py`, `client_import.py`).
The machine is shared: every table carries the load average, and a single run is no proof.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench as wsbench  # noqa: E402  (bench/bench.py: this folder comes first on sys.path)
import server_start  # noqa: E402

LOAD_TARGETS = ("floor", "ours-echo", "openenv-echo", "ours-plain", "openenv-plain")
PLAIN_KEYS = ("ours-plain", "openenv-plain", "floor")  # the columns of a plain-env row


@dataclass(frozen=True)
class Plan:
    """How long each measurement runs; `--quick` only checks that everything runs."""

    duration: float
    repeat: int
    levels: tuple[int, ...]
    idle_sessions: int
    atari_sessions: tuple[int, ...]
    atari_forms: tuple[str, ...]
    atari_duration: float
    atari_repeat: int
    start_rounds: int
    provider_starts: int
    import_runs: int


FULL = Plan(3.0, 3, (1, 8, 64, 1024), 1000, (1, 16), ("json", "binary", "list"), 3.0, 2, 5, 10, 5)
QUICK = Plan(0.3, 1, (1, 8), 10, (1,), ("binary",), 0.3, 1, 1, 1, 1)


@dataclass
class Row:
    figure: str
    ours: str
    openenv: str = "-"
    floor: str = "-"
    target: str = ""
    met: bool | None = None


@dataclass
class Section:
    key: str
    title: str
    command: str
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    loadavg: tuple[float, float] = (0.0, 0.0)


def _num(value: float | None, spec: str = ",.0f", unit: str = "") -> str:
    return "-" if value is None else f"{format(value, spec)}{unit}"


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _x(value: float | None) -> str:
    return _num(value, ".2f", "x")


def _sessions(n: int) -> str:
    return f"{n:,} session{'s' if n != 1 else ''}"


def _check(value: float | None, ok: Callable[[float], bool]) -> bool | None:
    return None if value is None else ok(value)


# ---------------------------------------------------------------------------------------------
# Items 1, 2, 3 and idle memory: one bench.py run
# ---------------------------------------------------------------------------------------------


def bench_argv(plan: Plan) -> list[str]:
    return [
        "--compare",
        *("--only", ",".join(LOAD_TARGETS)),
        *("--phases", "seq,conc,idle"),
        *("--levels", ",".join(map(str, plan.levels))),
        *("--duration", f"{plan.duration:g}", "--repeat", str(plan.repeat)),
        *("--idle-sessions", str(plan.idle_sessions), "--idle-timeout", "180"),
    ]


def open_loop_hook(argv: list[str]) -> list[str]:
    """Item 2's open-loop phase: the sessions together step at `OPEN_LOOP_RATE` (bench.py's
    `--phases open --rate`), as agents that think between steps."""
    phases = argv.index("--phases") + 1
    argv = [*argv]
    argv[phases] = f"{argv[phases]},open"
    return [*argv, "--rate", f"{OPEN_LOOP_RATE:g}"]


#: Steps/s of all sessions together in the open-loop phase: below every target's capacity.
OPEN_LOOP_RATE = 1000.0


def _open_p99(results: dict[str, Any], key: str, n: int) -> float | None:
    found = ((results.get(key) or {}).get("ws_open") or {}).get(str(n)) or {}
    value = found.get("p99_us") if found.get("ok", True) else None
    return float(value) if value is not None else None


def open_loop_rows(results: dict[str, Any], plan: Plan) -> list[Row]:
    """p99 at the most sessions against p99 at 64 (or the fewest above 1), at a fixed rate."""
    levels = sorted(n for n in plan.levels if n > 1)
    if len(levels) < 2:
        return []
    low = 64 if 64 in levels else levels[0]
    high = levels[-1]
    rows = []
    for kind in ("echo", "plain"):
        ratios = {
            side: _ratio(
                _open_p99(results, f"{side}-{kind}", high),
                _open_p99(results, f"{side}-{kind}", low),
            )
            for side in ("ours", "openenv")
        }
        floor = _ratio(_open_p99(results, "floor", high), _open_p99(results, "floor", low))
        rows.append(
            Row(
                f"{kind}, open loop at {OPEN_LOOP_RATE:,.0f} steps/s: p99 at {high:,} / p99 at "
                f"{low} sessions",
                *(_num(ratios[k], ".2f", "x") for k in ("ours", "openenv")),
                _num(floor, ".2f", "x"),
                "< 4x",
                _check(ratios["ours"], lambda r: r < 4),
            )
        )
    return rows


def _cpu(results: dict[str, Any], key: str, n: int) -> float | None:
    return wsbench._get(results, key, "ws_conc", str(n), "server_cpu_us_per_step")


def _gc_full(results: dict[str, Any], key: str, n: int) -> str:
    stats = (results.get(key, {}).get("ws_conc", {}).get(str(n)) or {}).get("gc")
    return wsbench._gc_cell(stats) if stats else "-"


def item1(results: dict[str, Any], plan: Plan) -> list[Row]:
    rows = []
    for n in plan.levels:
        echo = {k: _cpu(results, f"{k}-echo", n) for k in ("ours", "openenv")}
        plain = {k: _cpu(results, f"{k}-plain", n) for k in ("ours", "openenv")}
        floor = _num(_cpu(results, "floor", n), ",.1f")
        rows.append(
            Row(
                f"{_sessions(n)}: CPU µs per MCP step",
                *(_num(echo[k], ",.1f") for k in echo),
                floor,
            )
        )
        rows.append(
            Row(
                f"{_sessions(n)}: CPU µs per plain step",
                *(_num(plain[k], ",.1f") for k in plain),
                floor,
            )
        )
        mine = _ratio(echo["ours"], plain["ours"])
        rows.append(
            Row(
                f"{_sessions(n)}: MCP / plain",
                _x(mine),
                _x(_ratio(echo["openenv"], plain["openenv"])),
                target="≤ 2x",
                met=_check(mine, lambda v: v <= 2),
            )
        )

        def rates(impl: str, n: int = n) -> str:
            got = [
                wsbench._get(results, f"{impl}-{env}", "ws_conc", str(n), "steps_per_s")
                for env in ("echo", "plain")
            ]
            return " / ".join(map(_num, got))

        floor_rate = _num(wsbench._get(results, "floor", "ws_conc", str(n), "steps_per_s"))
        rows.append(
            Row(
                f"{_sessions(n)}: steps/s, MCP / plain", rates("ours"), rates("openenv"), floor_rate
            )
        )
    return rows


def item2(results: dict[str, Any], plan: Plan) -> list[Row]:
    low = 8 if 8 in plan.levels else plan.levels[0]
    high = max(plan.levels)
    rows = []
    for env in ("echo", "plain"):
        growth = {
            k: _ratio(_cpu(results, f"{k}-{env}", high), _cpu(results, f"{k}-{env}", low))
            for k in ("ours", "openenv")
        }
        floor = _ratio(_cpu(results, "floor", high), _cpu(results, "floor", low))
        rows.append(
            Row(
                f"{env}: CPU per step, {high:,} / {low} sessions",
                *(_num(None if g is None else (g - 1) * 100, "+.0f", "%") for g in growth.values()),
                _num(None if floor is None else (floor - 1) * 100, "+.0f", "%"),
                "≤ +20%",
                _check(growth["ours"], lambda v: v <= 1.2),
            )
        )
        if 64 in plan.levels and high > 64:
            p99 = {
                k: _ratio(
                    wsbench._get(results, f"{k}-{env}", "ws_conc", str(high), "p99_us"),
                    wsbench._get(results, f"{k}-{env}", "ws_conc", "64", "p99_us"),
                )
                for k in ("ours", "openenv")
            }
            floor_p99 = _ratio(
                wsbench._get(results, "floor", "ws_conc", str(high), "p99_us"),
                wsbench._get(results, "floor", "ws_conc", "64", "p99_us"),
            )
            rows.append(
                Row(
                    # Closed loop: p50 alone is sessions / throughput, so this ratio follows the
                    # session count whatever the server does; the target is judged open loop.
                    f"{env}: closed loop, p99 at {high:,} / p99 at 64 sessions",
                    _x(p99["ours"]),
                    _x(p99["openenv"]),
                    _x(floor_p99),
                )
            )
        for n in (low, high):
            rows.append(
                Row(
                    f"{env}: full GCs at {n:,} sessions (n / ms / longest ms; all generations ms)",
                    _gc_full(results, f"ours-{env}", n),
                    _gc_full(results, f"openenv-{env}", n),
                    _gc_full(results, "floor", n) if env == "plain" else "-",
                )
            )
    return rows + open_loop_rows(results, plan)


def item3(results: dict[str, Any], plan: Plan) -> list[Row]:
    n = max((level for level in plan.levels if level <= 64), default=1)
    p50 = {k: wsbench._get(results, k, "ws_seq", "p50_us") for k in LOAD_TARGETS}
    cpu = {k: _cpu(results, k, n) for k in LOAD_TARGETS}
    p50_ratio = _ratio(p50["ours-plain"], p50["floor"])
    cpu_ratio = _ratio(cpu["ours-plain"], cpu["floor"])
    return [
        Row("plain, 1 session: p50 µs", *(_num(p50[k]) for k in PLAIN_KEYS)),
        Row(
            "plain, 1 session: p50 / floor's",
            _x(p50_ratio),
            _x(_ratio(p50["openenv-plain"], p50["floor"])),
            target="≤ 1.5x",
            met=_check(p50_ratio, lambda v: v <= 1.5),
        ),
        Row(
            f"plain, {n} sessions: CPU µs per step",
            *(_num(cpu[k], ",.1f") for k in PLAIN_KEYS),
        ),
        Row(
            f"plain, {n} sessions: CPU per step / floor's",
            _x(cpu_ratio),
            _x(_ratio(cpu["openenv-plain"], cpu["floor"])),
            target="≤ 1.6x",
            met=_check(cpu_ratio, lambda v: v <= 1.6),
        ),
    ]


def memory_rows(results: dict[str, Any]) -> list[Row]:
    rows = []
    for env in ("echo", "plain"):
        per = {k: wsbench._get(results, k, "idle", "rss_per_session_kb") for k in LOAD_TARGETS}
        held = {k: (results.get(k, {}).get("idle") or {}).get("alive") for k in LOAD_TARGETS}
        floor = _num(per["floor"], ",.1f") if env == "plain" else "-"
        rows.append(
            Row(
                f"{env}: RSS KB per idle session ({held[f'ours-{env}'] or 0:,} held)",
                _num(per[f"ours-{env}"], ",.1f"),
                _num(per[f"openenv-{env}"], ",.1f"),
                floor,
                "< 100 KB",
                _check(per[f"ours-{env}"], lambda v: v < 100),
            )
        )
        threads = [
            (results.get(k, {}).get("idle") or {}).get("threads_after")
            for k in (f"ours-{env}", f"openenv-{env}")
        ]
        rows.append(Row(f"{env}: server threads with the sessions open", *map(_num, threads)))
    return rows


# ---------------------------------------------------------------------------------------------
# Item 4: Atari, direct against served
# ---------------------------------------------------------------------------------------------


def measure_atari(plan: Plan, tick: Callable[[float], None]) -> dict[str, Any]:
    """Every run of `atari_frames.py`'s rows, keyed `FORM@SESSIONS` (`direct@16`, ...)."""
    import atari_frames  # imports ale-py: only when this item runs

    process, url = atari_frames.start("atari_env.server.app:app")
    runs: dict[str, list[dict[str, Any]]] = {}
    total = plan.atari_repeat * len(plan.atari_sessions) * (1 + len(plan.atari_forms))
    try:
        for _ in range(plan.atari_repeat):
            for n in plan.atari_sessions:
                runs.setdefault(f"direct@{n}", []).append(
                    atari_frames.direct(n, plan.atari_duration)
                )
                tick(sum(map(len, runs.values())) / total)
                for form in plan.atari_forms:
                    served = atari_frames.served(url, process.pid, n, form, plan.atari_duration)
                    runs.setdefault(f"{form}@{n}", []).append(asyncio.run(served))
                    tick(sum(map(len, runs.values())) / total)
    finally:
        process.terminate()
        process.wait(15)
    return runs


def atari_rows(runs: dict[str, Any], plan: Plan) -> list[Row]:
    rows = []
    for n in plan.atari_sessions:
        direct = statistics.median(r["steps_per_s"] for r in runs[f"direct@{n}"])
        direct_cpu = statistics.median(r["cpu_us"] for r in runs[f"direct@{n}"])
        rows.append(
            Row(
                f"{_sessions(n)}: direct steps/s (CPU µs/step)",
                "",
                floor=f"{direct:,.0f} ({direct_cpu:,.0f})",
            )
        )
        for form in plan.atari_forms:
            rate = statistics.median(r["steps_per_s"] for r in runs[f"{form}@{n}"])
            cpu = statistics.median(r["server_cpu_us"] for r in runs[f"{form}@{n}"])
            share = rate / direct
            judged = form == "binary" and n == max(plan.atari_sessions)
            rows.append(
                Row(
                    f"{_sessions(n)}: served, {form} frames: steps/s (server CPU µs/step)",
                    f"{rate:,.0f} ({cpu:,.0f}), {share:.0%} of direct",
                    "no Atari env in 0.10" if form == "list" else "-",
                    target="≥ 80% of direct" if judged else "",
                    met=share >= 0.8 if judged else None,
                )
            )
    return rows


# ---------------------------------------------------------------------------------------------
# Item 5: server start
# ---------------------------------------------------------------------------------------------

#: (row name, module for `python -m`, way); the last three run `_serve.py APP` under ours,
#: OpenEnv 0.10's and (the floor app) our interpreter, so the module slot names whose it is.
START_CASES: tuple[tuple[str, str, str], ...] = (
    *(("echo (MCP), `python -m echo_env.server.app`", "echo_env.server.app", way)
      for way in ("bytecode", "no bytecode", "boot")),
    *(("plain (math_env), `python -m math_env.server.app`", "math_env.server.app", way)
      for way in ("bytecode", "no bytecode")),
    *(("echo, `_serve.py APP` (same launcher)", who, "bytecode")
      for who in ("ours", "openenv", "floor")),
)  # fmt: skip


def _case_label(case: tuple[str, str, str]) -> str:
    return f"{case[0]}, {case[2]} [{case[1]}]"


def measure_starts(
    plan: Plan, openenv_python: str, tick: Callable[[float], None]
) -> dict[str, Any]:
    """(ms to /health, server CPU ms) of every start, keyed by `_case_label`."""
    serve = [str(HERE / "_serve.py"), "--uvicorn-json", '{"log_level": "warning"}']
    commands: dict[str, list[str]] = {
        "ours": [wsbench.OUR_PYTHON, *serve, "echo_env.server.app:app"],
        "openenv": [openenv_python, *serve, "echo_env_openenv:app"],
        "floor": [wsbench.OUR_PYTHON, *serve, "floor_app:app"],
    }
    if plan.start_rounds > 1:  # warm the page cache and write the sources' .pyc
        for _, module, _ in START_CASES:
            server_start.start_once(module, "bytecode", command=commands.get(module))
    times: dict[str, list[tuple[float, float]]] = {}
    for round_ in range(plan.start_rounds):
        for i, case in enumerate(START_CASES):
            _, module, way = case
            timing = server_start.start_once(module, way, command=commands.get(module))[:2]
            times.setdefault(_case_label(case), []).append(timing)
            tick((round_ * len(START_CASES) + i + 1) / (plan.start_rounds * len(START_CASES)))
    return times


def start_rows(times: dict[str, Any], plan: Plan) -> list[Row]:
    runs = [times[_case_label(case)] for case in START_CASES]
    ms = [statistics.median(t for t, _ in case_runs) for case_runs in runs]
    cpu = [statistics.median(c for _, c in case_runs) for case_runs in runs]

    def cell(i: int) -> str:
        return f"{ms[i]:,.0f} ms (CPU {cpu[i]:,.0f})"

    rows = []
    for i, (name, _, way) in enumerate(START_CASES[:5]):
        judged = way != "no bytecode"
        rows.append(
            Row(
                f"{name}, {way}: to /health",
                cell(i),
                target="< 1 s" if judged else "",
                met=ms[i] < 1000 if judged else None,
            )
        )
    rows.append(Row("echo, `_serve.py APP`: to /health", cell(5), cell(6), cell(7)))
    rows.append(
        Row(
            "start without bytecode / with (echo, plain)",
            f"{ms[1] / ms[0]:.1f}x, {ms[4] / ms[3]:.1f}x",
        )
    )
    return rows


# ---------------------------------------------------------------------------------------------
# The figures the top-level README states
# ---------------------------------------------------------------------------------------------

README_PROVIDERS = ("local", "sandbox")  # the two columns of the README's `from_env` row


def readme_claims(readme: Path = HERE.parent / "README.md") -> dict[str, str]:
    """The figures the README's performance table states now, read from it (so a report can
    never compare against a stale copy): each provider's `from_env` p50 and the import time."""
    claims: dict[str, str] = {}
    for line in readme.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2:
            continue
        if cells[0].startswith('`from_env("echo")` to the first step'):
            values = [v.strip() for v in cells[1].removesuffix("ms").split("/")]
            claims.update({k: f"{v} ms" for k, v in zip(README_PROVIDERS, values, strict=False)})
        elif cells[0] == "`from echo_env import EchoEnv` (imports)":
            claims["client_import"] = cells[1]
    return claims


def measure_readme(plan: Plan, tick: Callable[[float], None]) -> dict[str, Any]:
    import client_import
    import providers

    raw: dict[str, Any] = {}
    for i, name in enumerate(README_PROVIDERS):
        settings = argparse.Namespace(starts=plan.provider_starts, idle=0, fleet=[])
        try:
            raw[name] = asdict(asyncio.run(providers.measure(name, "echo", settings)))
        except Exception as exc:  # e.g. no usable bubblewrap: say so, keep going
            raw[name] = {"error": f"{type(exc).__name__}: {str(exc)[:60]}"}
        tick((i + 1) / 3)
    code = client_import.TARGETS["typed MCP client (from echo_env import EchoEnv)"]
    client_import.measure(code)  # warm the bytecode cache
    raw["client_import"] = [client_import.measure(code)[:2] for _ in range(plan.import_runs)]
    tick(1.0)
    return raw


def readme_rows(raw: dict[str, Any], plan: Plan) -> list[Row]:
    from providers import Figures

    claims = readme_claims()
    rows = []
    for name in README_PROVIDERS:
        found = raw.get(name) or {"error": "not measured"}
        if "error" in found:
            cell = f"n/a ({found['error']})"
        else:
            figures = Figures(**found)
            cell = f"{figures.p(0.5) * 1000:,.0f} ms (p95 {figures.p(0.95) * 1000:,.0f})"
        rows.append(
            Row(
                f"`from_env('echo')`, provider {name}: start to first step, p50",
                cell,
                target=f"README: {claims.get(name, 'not stated')}",
            )
        )
    samples = raw["client_import"]
    rows.append(
        Row(
            "`from echo_env import EchoEnv`: import s (CPU s)",
            f"{statistics.median(s[0] for s in samples):.2f} "
            f"({statistics.median(s[1] for s in samples):.2f})",
            target=f"README: {claims.get('client_import', 'not stated')}",
        )
    )
    return rows


# ---------------------------------------------------------------------------------------------
# Sections: which part measures them and how the rows are built from its raw figures
# ---------------------------------------------------------------------------------------------


def _load_rows(build: Callable[[dict[str, Any], Plan], list[Row]]) -> Callable[..., list[Row]]:
    return lambda raw, plan: build(raw["results"], plan)


#: key -> (part, title, rows from the part's raw figures)
SECTIONS: dict[str, tuple[str, str, Callable[[Any, Plan], list[Row]]]] = {
    "item1": ("load", "Item 1: MCP tool-call step against a plain step", _load_rows(item1)),
    "item2": ("load", "Item 2: growth with sessions, full collections", _load_rows(item2)),
    "item3": ("load", "Item 3: plain env against the bare-WebSocket floor", _load_rows(item3)),
    "memory": ("load", "Memory per idle session (connect + reset, one server process)",
               _load_rows(lambda results, plan: memory_rows(results))),
    "item4": ("atari", "Item 4: Atari (pong, RGB) stepped in process against served over /ws",
              atari_rows),
    "item5": ("start", "Item 5: server start to the first 200 on /health", start_rows),
    "readme": ("readme", "Figures the top-level README states", readme_rows),
}  # fmt: skip
RAW_KEYS = {"load": "bench", "atari": "atari", "start": "start", "readme": "readme"}
NOTES = {
    "item4": ["floor: the same environment stepped in process (no wire)."],
    "item5": [
        "OpenEnv 0.10 and the floor: the same launcher (`bench/_serve.py`), so the row compares "
        "the servers' imports and app construction."
    ],
}


def commands(plan: Plan) -> dict[str, str]:
    return {
        "load": "bench/bench.py " + shlex.join(bench_argv(plan)),
        "atari": f"bench/atari_frames.py --duration {plan.atari_duration:g} --sessions "
        f"{','.join(map(str, plan.atari_sessions))} --forms {','.join(plan.atari_forms)} "
        f"--repeat {plan.atari_repeat}",
        "start": f"bench/server_start.py --rounds {plan.start_rounds} (and _serve.py APP under "
        "each venv's interpreter)",
        "readme": f"bench/providers.py --providers local,sandbox --starts {plan.provider_starts} "
        f"--idle 0 --fleet ''; bench/client_import.py --runs {plan.import_runs}",
    }


def build_sections(
    raw: dict[str, Any], plan: Plan, loadavg: dict[str, tuple[float, float]]
) -> list[Section]:
    sections = []
    for key, (part, title, build) in SECTIONS.items():
        if RAW_KEYS[part] in raw:
            rows = build(raw[RAW_KEYS[part]], plan)
            sections.append(
                Section(key, title, commands(plan)[part], rows, NOTES.get(key, []), loadavg[part])
            )
    return sections


# ---------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------

COLUMNS = ("figure", "ours", "OpenEnv 0.10", "floor", "target", "result")


def _verdict(met: bool | None) -> str:
    return "" if met is None else ("met" if met else "NOT met")


def render(console: Any, sections: list[Section]) -> None:
    from rich.table import Table

    for section in sections:
        caption = (
            f"{section.command} (load average {section.loadavg[0]:.1f} → {section.loadavg[1]:.1f})"
        )
        table = Table(title=section.title, title_justify="left", caption=caption)
        for col in COLUMNS:
            table.add_column(col, justify="left" if col in ("figure", "target") else "right")
        for row in section.rows:
            verdict = _verdict(row.met)
            if row.met is not None:
                verdict = f"[{'green' if row.met else 'red'}]{verdict}[/]"
            table.add_row(row.figure, row.ours, row.openenv, row.floor, row.target, verdict)
        console.print(table)
        for note in section.notes:
            console.print(f"  {note}")


def markdown(sections: list[Section], meta: dict[str, Any]) -> str:
    out = [
        f"Run {meta['started']} → {meta['finished']} UTC at `{meta['revision']}`, "
        f"{meta['cpus']} CPUs, load average {meta['loadavg'][0]:.1f} → {meta['loadavg'][1]:.1f}; "
        f"command: `{meta['command']}`.",
        "",
    ]
    previous = ""
    for section in sections:
        out += [f"#### {section.title}", ""]
        if section.command != previous:
            out += [
                f"`{section.command}` (load average {section.loadavg[0]:.1f} → "
                f"{section.loadavg[1]:.1f})",
                "",
            ]
        previous = section.command
        out += ["| " + " | ".join(COLUMNS) + " |", "|---|--:|--:|--:|---|---|"]
        for row in section.rows:
            cells = (row.figure, row.ours, row.openenv, row.floor, row.target, _verdict(row.met))
            out.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
        out += [""] + [f"- {note}" for note in section.notes] + ([""] if section.notes else [])
    return "\n".join(out)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="short runs: checks, not figures")
    p.add_argument("--json", dest="json_out", type=Path, help="write every figure here")
    p.add_argument("--markdown", type=Path, help="write the tables here (bench/README.md form)")
    p.add_argument(
        "--items",
        default="load,atari,start,readme",
        help="parts to run: load (items 1-3, memory), atari (4), start (5), readme",
    )
    p.add_argument(
        "--from-json",
        type=Path,
        help="measure nothing: print (and --markdown) the tables of an earlier --json report",
    )
    return p.parse_args(argv)


def measure(
    parts: set[str], plan: Plan, console: Any
) -> tuple[dict[str, Any], dict[str, tuple[float, float]]]:
    """Raw figures of every part asked for, and the load average before and after each."""
    progress = wsbench.make_progress(console)
    overall = progress.add_task("issue 18 report", total=len(parts))
    raw: dict[str, Any] = {}
    loadavg: dict[str, tuple[float, float]] = {}
    bench_args = wsbench.parse_args(open_loop_hook(bench_argv(plan)))

    def staged(part: str, name: str, run: Callable[[Callable[[float], None]], Any]) -> None:
        before = os.getloadavg()[0]
        with progress:
            task = progress.add_task(name, total=1.0)
            raw[RAW_KEYS[part]] = run(lambda fraction: progress.update(task, completed=fraction))
            progress.remove_task(task)
            progress.advance(overall)
        loadavg[part] = (before, os.getloadavg()[0])

    if "load" in parts:
        before = os.getloadavg()[0]
        results, _, meta = wsbench.collect(bench_args, console, progress)  # its own progress rows
        raw["bench"] = {"meta": meta, "results": results}
        loadavg["load"] = (before, os.getloadavg()[0])
        progress.advance(overall)
    if "atari" in parts:
        staged("atari", "item 4: Atari direct vs served", lambda t: measure_atari(plan, t))
    if "start" in parts:
        python = bench_args.openenv_python or wsbench.published_openenv_python()
        staged("start", "item 5: server start", lambda t: measure_starts(plan, python, t))
    if "readme" in parts:
        staged("readme", "README figures", lambda t: measure_readme(plan, t))
    return raw, loadavg


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    args = parse_args(argv)
    console = Console() if sys.stdout.isatty() else Console(width=170)
    if args.from_json:
        report = json.loads(args.from_json.read_text())
        meta, raw = report["meta"], report["raw"]
        plan = Plan(**{k: tuple(v) if isinstance(v, list) else v for k, v in meta["plan"].items()})
        loadavg = {SECTIONS[s["key"]][0]: tuple(s["loadavg"]) for s in report["sections"]}
    else:
        plan = QUICK if args.quick else FULL
        load0 = os.getloadavg()[0]
        started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
        raw, loadavg = measure(
            {p.strip() for p in args.items.split(",") if p.strip()}, plan, console
        )
        meta = {
            "started": started,
            "finished": time.strftime("%H:%M", time.gmtime()),
            "revision": wsbench.git_revision(),
            "cpus": len(os.sched_getaffinity(0)),
            "loadavg": (load0, os.getloadavg()[0]),
            "command": "bench/perf_report.py" + (" --quick" if args.quick else ""),
            "plan": asdict(plan),
        }
    sections = build_sections(raw, plan, loadavg)
    console.print()
    render(console, sections)
    console.print(
        f"[dim]{meta['started']} UTC at {meta['revision']}; load average "
        f"{meta['loadavg'][0]:.1f} → {meta['loadavg'][1]:.1f} on {meta['cpus']} CPUs"
    )
    if args.markdown:
        args.markdown.write_text(markdown(sections, meta) + "\n")
    if args.json_out:
        report = {"meta": meta, "sections": [asdict(s) for s in sections], "raw": raw}
        args.json_out.write_text(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
