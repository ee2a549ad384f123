"""MCP tools, MCP clients and types: OpenEnv-style code against both packages.

- mcp_api_snippets.py runs with our venv and with the compat venv (openenv==0.10.0); every result
  must be the same, except the deliberate differences listed in DIFFERENCES (documented in
  docs/compatibility.md).
- published_counter_script.py drives a server whose tool keeps a count in fastmcp's session state
  with the published clients over every transport; our server must give what the published
  server gives: "1" then "2" in one session, "1" in a fresh one.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.server import RunningServer, serve

from .conftest import OUR_PYTHON

pytestmark = pytest.mark.compat

HERE = Path(__file__).resolve().parent
COUNTER_APP = "tests.compat.counter_server:app"
TIMEOUT_S = 120

#: (section, key) -> (published 0.10, ours): the deliberate differences.
DIFFERENCES = {
    # In process, OpenEnv opens a new fastmcp client session per step, so ctx state is lost
    # between steps; here the environment instance is the session.
    ("tools", "counts_in_process"): (["1", "1"], ["1", "2"]),
    # Token text that is not JSON becomes an empty token list in OpenEnv (the tokens are lost);
    # here validation refuses it.
    ("types", "pre_tokens_bad_text"): (
        {"metadata": {}, "action_id": 1, "tokens": []},
        {"raised": "ValidationError", "names_generic": False},
    ),
}


def _run_json(python: str, script: str, *args: str) -> Any:
    done = subprocess.run(
        [python, str(HERE / script), *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        cwd=HERE,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def snippets(compat_python: str) -> dict[str, Any]:
    return {
        "published": _run_json(compat_python, "mcp_api_snippets.py"),
        "ours": _run_json(OUR_PYTHON, "mcp_api_snippets.py"),
    }


@pytest.mark.parametrize("section", ["types", "tools", "client"])
def test_openenv_snippets_give_the_published_results(snippets, section):
    published, ours = snippets["published"][section], snippets["ours"][section]
    assert sorted(ours) == sorted(published)
    for key in published:
        expected = DIFFERENCES.get((section, key))
        if expected is None:
            assert ours[key] == published[key], key
        else:
            assert (published[key], ours[key]) == expected, key


def test_snippets_cover_the_issue_items(snippets):
    """The items of issue 12 hold in our run (not only "same as published")."""
    ours = snippets["ours"]
    assert ours["client"]["use_production_mode"] == [True, False]
    assert ours["client"]["mode_simulation"] == {"raised": "ValueError", "names_generic": True}
    for name in ("reset", "step", "state", "close"):
        assert ours["tools"][f"reserved_{name}"] == "ValueError"
    assert ours["tools"]["result_type"] == "fastmcp.client.client.CallToolResult"
    assert ours["tools"]["result_data"] == "1"
    assert ours["types"]["error_response"] == {
        "jsonrpc": "2.0",
        "id": "a",
        "error": {"code": -32601, "message": "Method not found", "data": None},
    }


@pytest.fixture(scope="module")
def counter_servers(compat_python: str) -> Iterator[dict[str, RunningServer]]:
    with serve(COUNTER_APP) as ours:
        with serve(COUNTER_APP, python=compat_python) as published:
            yield {"ours": ours, "published": published}


@pytest.mark.parametrize("target", ["ours", "published"])
def test_published_clients_keep_tool_session_state(compat_python, counter_servers, target):
    counts = _run_json(compat_python, "published_counter_script.py", counter_servers[target].url)
    assert counts == {
        "mcp_tool_client": ["1", "2", "1"],
        "ws_steps": ["1", "2", "1"],
        "ws_mcp_messages": ["1", "2", "1"],
        "http_sessions": ["1", "2", "1"],
    }
