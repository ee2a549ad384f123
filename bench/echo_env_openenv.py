"""The OpenEnv echo server of the compat tests (`tests/compat/published_echo_server.py`, written
against the published `openenv==0.10.0`), with the session limit from MAX_CONCURRENT_ENVS.

Run it with the interpreter of the published openenv's venv.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

os.environ["OPENENV_COMPAT_MAX_ENVS"] = os.environ.get("MAX_CONCURRENT_ENVS", "16384")
_PATH = Path(__file__).resolve().parents[1] / "tests" / "compat" / "published_echo_server.py"
_spec = importlib.util.spec_from_file_location("openenv_published_echo", _PATH)
if _spec is None or _spec.loader is None:
    raise ImportError(f"cannot load the OpenEnv echo server from {_PATH}")
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)

app = _module.app
