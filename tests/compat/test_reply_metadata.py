"""Where `/reset` and `/step` replies carry the observation's metadata, on both servers.

OpenEnv 0.10 puts it inside `observation` (typed clients build their observation from that
dict) and, when it is not empty, also at the top level (its `GenericEnvClient` and `MCPToolClient`
read `StepResult.metadata` from there). Both published clients rely on one of the two places, so
our server carries it in both, as OpenEnv does.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.server import RunningServer

pytestmark = pytest.mark.compat

READY = {"status": "ready", "message": "Echo environment ready!"}
CALL = {"type": "call_tool", "tool_name": "echo_message", "arguments": {"message": "Hi"}}


@pytest.fixture(scope="module")
def replies(
    our_server: RunningServer, published_server: RunningServer
) -> dict[str, dict[str, Any]]:
    out = {}
    for target, server in (("ours", our_server), ("published", published_server)):
        with httpx.Client(base_url=server.url, timeout=30) as http:
            out[target] = {
                "reset": http.post("/reset", json={}).json(),
                "step": http.post("/step", json={"action": CALL}).json(),
            }
    return out


@pytest.mark.parametrize("target", ["ours", "published"])
def test_metadata_is_inside_the_observation_and_at_the_top(replies, target):
    reset, step = replies[target]["reset"], replies[target]["step"]
    assert reset["observation"]["metadata"] == READY
    assert reset["metadata"] == READY
    assert step["observation"]["metadata"] == {}
    assert not step["metadata"]  # empty: {} here, null from OpenEnv's HTTP reply model


def test_replies_have_the_same_fields(replies):
    for kind in ("reset", "step"):
        ours, published = replies["ours"][kind], replies["published"][kind]
        assert sorted(ours) == sorted(published), kind
        assert set(published["observation"]) <= set(ours["observation"]), kind
