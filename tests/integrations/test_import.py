"""The integrations import their trainers only when used: the core install stays light."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_trl_integration_imports_no_trainer() -> None:
    code = (
        "import sys, openenv.integrations.trl as t; "
        "assert callable(t.rollout_func) and callable(t.environment_factory); "
        "heavy = sorted({'torch', 'transformers', 'trl'} & set(sys.modules)); "
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
