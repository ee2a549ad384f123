"""examples/train_blackjack.py: its reading of the game, and a short real training run."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.server import REPO

SCRIPT = REPO / "examples" / "train_blackjack.py"
UPCARDS = ("A", "2", "3", "4", "5", "6", "7", "8", "9", "10")


@pytest.fixture(scope="module")
def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("train_blackjack", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


def test_reads_the_hand_without_the_hole_card(example: ModuleType) -> None:
    read = example.read_hand
    view = read("Current Phase: Player Turn\nPlayer 0: Cards: S5 HK\nDealer: Cards: ?? CK\n")
    assert view == example.HandView(total=15, soft=False, upcard=10)
    assert read("Player 0: Cards: SA H7\nDealer: Cards: ?? DA") == example.HandView(18, True, 1)
    # an ace that would bust as 11 counts 1: the hand is hard
    assert read("Player 0: Cards: SA H7 C9\nDealer: Cards: ?? D6") == example.HandView(17, False, 6)
    with pytest.raises(ValueError, match="not a blackjack observation"):
        read("Current Phase: Dealer Turn")


def test_basic_strategy_table(example: ModuleType) -> None:
    chart = example.basic_chart()
    assert set(chart["hard 11"].values()) == {"H"} and set(chart["hard 17"].values()) == {"S"}
    assert "".join(chart["hard 12"].values()) == "HHHSSSHHHH"  # A, 2..10
    assert "".join(chart["hard 16"].values()) == "HSSSSSHHHH"
    assert "".join(chart["soft 18"].values()) == "HSSSSSSSHH"
    assert set(chart["soft 17"].values()) == {"H"} and set(chart["soft 19"].values()) == {"S"}


def test_the_comparison_with_basic_strategy_is_true_either_way(example: ModuleType) -> None:
    assert example.versus_basic(0.425, 0.431) == "0.6 points below basic strategy's"
    assert example.versus_basic(0.44, 0.431) == "0.9 points above basic strategy's"
    assert example.versus_basic(0.4312, 0.4311) == "level with basic strategy's"


def test_without_the_openspiel_environment_it_says_how_to_install_it() -> None:
    """After the README's quick start (openenv and echo_env only) numpy and openspiel_env are
    missing: one message naming the install command, no traceback."""
    code = (
        "import runpy, sys\n"
        "sys.modules['numpy'] = None\n"
        f"sys.argv = [{str(SCRIPT)!r}]\n"
        f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 1
    assert "Traceback" not in out.stderr, out.stderr
    assert "the OpenSpiel environment, which is not installed here" in out.stderr
    assert " -e ./envs/openspiel_env`" in out.stderr, out.stderr


@pytest.mark.slow
def test_a_short_run_learns_against_the_served_environment(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the example draws with matplotlib (extra examples)")
    png, summary = tmp_path / "curve.png", tmp_path / "summary.json"
    # A fixed number of steps: the run is deterministic (seeded deals and action sampling), the
    # time budget is only a cap.
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--steps", "80", "--minutes", "5", "--sessions", "8",
         "--groups", "16", "--eval-hands", "500", "--curve-hands", "100", "--curve-points", "3",
         "--seed", "1", "--out", str(png), "--summary", str(summary)],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    result = json.loads(summary.read_text())
    assert result["steps"] == 80 and result["hands_trained"] == 80 * 16 * 8
    scores = result["scores"]
    assert {score["hands"] for score in scores.values()} == {500}
    chart = result["greedy_policy"]
    # the clearest decisions (single rarer cells may still be off after a short run): stand on
    # hard 18 to 21 whatever the dealer shows, and mostly hit hard 9 to 11, which cannot bust
    assert all(chart[f"hard {total}"][up] == "S" for total in range(18, 22) for up in UPCARDS)
    hits = [chart[f"hard {total}"][up] for total in (9, 10, 11) for up in UPCARDS].count("H")
    assert hits >= 20, {total: chart[f"hard {total}"] for total in (9, 10, 11)}
    # far above random play on the same 500 deals (it is around 28%, basic strategy 43%)
    assert scores["trained greedy"]["win_rate"] > scores["random"]["win_rate"] + 0.05


@pytest.mark.slow
def test_the_sessions_can_come_from_a_fleet(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the example draws with matplotlib (extra examples)")
    summary = tmp_path / "summary.json"
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--fleet", "2", "--steps", "3", "--minutes", "5",
         "--sessions", "4", "--groups", "4", "--group-size", "2", "--eval-hands", "20",
         "--curve-hands", "10", "--curve-points", "1", "--out", str(tmp_path / "curve.png"),
         "--summary", str(summary)],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "a fleet of 2 OpenSpiel servers" in out.stdout
    assert json.loads(summary.read_text())["hands_trained"] == 3 * 4 * 2
