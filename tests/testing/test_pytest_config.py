"""The suite's own pytest configuration: what a failing CI run shows in its summary."""

from __future__ import annotations

import shlex
from pathlib import Path

from openenv.core.manifest import tomllib

ROOT = Path(__file__).resolve().parents[2]


def test_the_summary_names_failures_and_errors_as_well_as_skips() -> None:
    # `-r` replaces pytest's default summary characters (fE): a bare `-rs` would list the
    # skips and hide which tests failed or errored, as it once did on a fresh machine.
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    addopts = shlex.split(config["tool"]["pytest"]["ini_options"]["addopts"])
    report_chars = "".join(arg[2:] for arg in addopts if arg.startswith("-r"))
    assert {"f", "E", "s"} <= set(report_chars), addopts
