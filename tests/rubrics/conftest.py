from __future__ import annotations

from collections.abc import Iterator

import pytest

from .fake_llm import FakeLLMServer


@pytest.fixture
def llm_server() -> Iterator[FakeLLMServer]:
    """A loopback stand-in for a paid LLM API (see fake_llm.py)."""
    with FakeLLMServer() as server:
        yield server
