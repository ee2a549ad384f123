"""Settings for every test run from this checkout (tests/ and envs/*/tests).

Bytecode is cached outside the tree even where the machine sets PYTHONDONTWRITEBYTECODE:
otherwise every server, CLI and script subprocess the tests start (and this process) compiles
FastAPI, pydantic, fastmcp... from source again, which is most of their start-up CPU.
"""

from __future__ import annotations

import os
import sys

from tests.support.pycache import PYCACHE_ENV

os.environ.update(PYCACHE_ENV)
sys.dont_write_bytecode = False
sys.pycache_prefix = PYCACHE_ENV["PYTHONPYCACHEPREFIX"]

# The real model server (SmolLM2-135M-Instruct), one per test session: `real_model`; and CI's
# one run of each test across the fresh machine and the host (tests/support/passed_elsewhere.py).
pytest_plugins = ["tests.support.real_model", "tests.support.passed_elsewhere"]
