"""HTTP routes: shapes and status codes (reference 2.4), HTTP sessions and error bodies."""

from __future__ import annotations

import httpx
import pytest

from tests.apps.counter import CounterAction, CounterObservation, CounterState
from tests.support.server import RunningServer

from .conftest import MAX_MESSAGE_BYTES
from .helpers import capacity, wait_capacity

SESSION_HEADER = "X-OpenEnv-Session-Id"
PAYLOAD_KEYS = {"observation", "reward", "done", "metadata"}


@pytest.fixture(scope="module")
def http(counter_server: RunningServer):
    with httpx.Client(base_url=counter_server.url, timeout=10) as client:
        yield client


def test_health(http: httpx.Client) -> None:
    response = http.get("/health")
    assert response.status_code == 200
    assert response.json() == {"status": "healthy"}


def test_metadata_is_the_environments_metadata(http: httpx.Client) -> None:
    response = http.get("/metadata")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {
        "name",
        "description",
        "readme_content",
        "version",
        "author",
        "documentation_url",
    }
    # A fresh env's get_metadata() (the counter env keeps the default one).
    assert body == {
        "name": "CounterEnv",
        "description": "CounterEnv environment",
        "readme_content": None,
        "version": "1.0.0",
        "author": None,
        "documentation_url": None,
    }


def test_schema_uses_the_environments_own_models(http: httpx.Client) -> None:
    response = http.get("/schema")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"action", "observation", "state"}
    assert body["action"] == CounterAction.model_json_schema()
    assert body["observation"] == CounterObservation.model_json_schema()
    assert body["state"] == CounterState.model_json_schema()
    assert body["state"]["title"] == "CounterState"
    assert {"episode_id", "step_count", "count", "seed", "history"} <= set(
        body["state"]["properties"]
    )
    assert body["action"]["properties"]["amount"]["type"] == "integer"
    assert "amount" in body["action"]["required"]


def test_openapi_version_is_protocol_profile_1(http: httpx.Client) -> None:
    response = http.get("/openapi.json")
    assert response.status_code == 200
    info = response.json()["info"]
    assert info["version"].startswith("1.")
    paths = response.json()["paths"]
    for path in ("/health", "/metadata", "/schema", "/reset", "/step", "/state"):
        assert path in paths, path


def test_reset_without_body(http: httpx.Client) -> None:
    response = http.post("/reset")
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == PAYLOAD_KEYS
    assert body["observation"] == {"count": 0, "history_length": 0, "metadata": {"start": 0}}
    assert body["done"] is False
    assert body["metadata"] == {"start": 0}
    assert SESSION_HEADER.lower() not in response.headers


def test_reset_with_empty_object(http: httpx.Client) -> None:
    response = http.post("/reset", json={})
    assert response.status_code == 200, response.text
    assert set(response.json()) == PAYLOAD_KEYS


def test_reset_seed_is_deterministic(http: httpx.Client) -> None:
    first = http.post("/reset", json={"seed": 7}).json()
    second = http.post("/reset", json={"seed": 7}).json()
    other = http.post("/reset", json={"seed": 8}).json()
    assert first == second
    assert first["observation"]["count"] != other["observation"]["count"]


def test_reset_negative_seed_is_422(http: httpx.Client) -> None:
    response = http.post("/reset", json={"seed": -1})
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert isinstance(detail, list) and len(detail) == 1
    assert detail[0]["type"] == "greater_than_equal"
    assert detail[0]["loc"] == ["body", "seed"]
    assert detail[0]["input"] == -1


def test_reset_invalid_json_body_is_422(http: httpx.Client) -> None:
    response = http.post("/reset", content=b"{nope", headers={"content-type": "application/json"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["type"] == "json_invalid"


def test_step_valid_action(http: httpx.Client) -> None:
    response = http.post("/step", json={"action": {"amount": 4}})
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == PAYLOAD_KEYS
    # Stateless: a fresh env that was never reset starts at 0.
    assert body["observation"] == {"count": 4, "history_length": 1, "metadata": {"step": 1}}
    assert body["reward"] is True
    assert body["done"] is False
    assert body["metadata"] == {"step": 1}


@pytest.mark.parametrize(
    ("action", "loc", "kind"),
    [
        ({"amount": "many"}, ["amount"], "int_parsing"),
        ({}, ["amount"], "missing"),
        ({"amount": 1, "bogus": 2}, ["bogus"], "extra_forbidden"),
    ],
)
def test_step_invalid_action_is_422_relative_to_action(
    http: httpx.Client, action: dict, loc: list, kind: str
) -> None:
    response = http.post("/step", json={"action": action})
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert isinstance(detail, list) and len(detail) == 1, detail
    assert detail[0]["loc"] == loc
    assert detail[0]["type"] == kind


def test_step_body_without_action_is_422(http: httpx.Client) -> None:
    response = http.post("/step", json={"amount": 1})
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert any(err["loc"] == ["body", "action"] for err in detail), detail


def test_state_is_stateless(http: httpx.Client) -> None:
    http.post("/step", json={"action": {"amount": 3}})
    response = http.get("/state")
    assert response.status_code == 200
    body = response.json()
    assert body["step_count"] == 0
    assert isinstance(body["episode_id"], str)
    # A fresh env each time.
    assert http.get("/state").json()["episode_id"] != body["episode_id"]


def test_http_session_lifecycle(http: httpx.Client) -> None:
    created = http.post("/reset", json={"seed": 3}, headers={SESSION_HEADER: "new"})
    assert created.status_code == 200, created.text
    body = created.json()
    sid = body["session_id"]
    assert isinstance(sid, str) and sid and sid != "new"
    assert created.headers[SESSION_HEADER] == sid
    start = body["observation"]["count"]

    headers = {SESSION_HEADER: sid}
    for amount in (2, 5):
        step = http.post("/step", json={"action": {"amount": amount}}, headers=headers)
        assert step.status_code == 200, step.text
        assert step.headers[SESSION_HEADER] == sid
        assert step.json()["session_id"] == sid
    assert step.json()["observation"]["count"] == start + 7

    state = http.get("/state", headers=headers)
    assert state.status_code == 200
    st = state.json()
    assert st["step_count"] == 2
    assert st["count"] == start + 7
    assert st["seed"] == 3
    assert st["history"] == [2, 5]

    # The session is also addressable by query parameter.
    assert http.get("/state", params={"session_id": sid}).json()["step_count"] == 2

    closed = http.delete(f"/sessions/{sid}")
    assert closed.status_code == 200
    assert closed.json() == {"session_id": sid, "closed": True}

    gone = http.get("/state", headers=headers)
    assert gone.status_code == 404
    assert gone.json()["detail"]["code"] == "SESSION_NOT_FOUND"
    assert gone.json()["detail"]["category"] == "infrastructure"
    again = http.delete(f"/sessions/{sid}")
    assert again.status_code == 404
    assert again.json()["detail"]["code"] == "SESSION_NOT_FOUND"


async def test_http_session_holds_a_slot_until_deleted(two_slot_server: RunningServer) -> None:
    await wait_capacity(two_slot_server.url, active_sessions=0)
    async with httpx.AsyncClient(base_url=two_slot_server.url) as client:
        sid = (await client.post("/reset", headers={SESSION_HEADER: "new"})).json()["session_id"]
        assert capacity(two_slot_server.url)["active_sessions"] == 1
        assert (await client.delete(f"/sessions/{sid}")).status_code == 200
        assert capacity(two_slot_server.url)["active_sessions"] == 0


@pytest.mark.parametrize("method", ["step", "state", "reset"])
def test_unknown_session_is_404(http: httpx.Client, method: str) -> None:
    headers = {SESSION_HEADER: "no-such-session"}
    if method == "step":
        response = http.post("/step", json={"action": {"amount": 1}}, headers=headers)
    elif method == "reset":
        response = http.post("/reset", json={}, headers=headers)
    else:
        response = http.get("/state", headers=headers)
    assert response.status_code == 404
    detail = response.json()["detail"]
    assert detail["code"] == "SESSION_NOT_FOUND"
    assert "no-such-session" in detail["message"]


def test_env_exception_is_500_execution_error(http: httpx.Client) -> None:
    response = http.post("/step", json={"action": {"amount": 13}})
    assert response.status_code == 500
    assert response.headers["content-type"].startswith("application/json")
    detail = response.json()["detail"]
    assert detail["code"] == "EXECUTION_ERROR"
    assert detail["category"] == "environment"
    assert "unlucky" in detail["message"]


def test_env_exception_keeps_http_session_usable(http: httpx.Client) -> None:
    sid = http.post("/reset", headers={SESSION_HEADER: "new"}).json()["session_id"]
    headers = {SESSION_HEADER: sid}
    try:
        assert http.post("/step", json={"action": {"amount": 1}}, headers=headers).is_success
        failed = http.post("/step", json={"action": {"amount": 13}}, headers=headers)
        assert failed.status_code == 500
        assert failed.json()["detail"]["code"] == "EXECUTION_ERROR"
        ok = http.post("/step", json={"action": {"amount": 1}}, headers=headers)
        assert ok.status_code == 200
        assert ok.json()["observation"]["count"] == 2
        assert http.get("/state", headers=headers).json()["step_count"] == 2
    finally:
        http.delete(f"/sessions/{sid}")


def test_body_over_limit_is_413(http: httpx.Client) -> None:
    big = {"action": {"amount": 1, "metadata": {"pad": "x" * (MAX_MESSAGE_BYTES + 100)}}}
    response = http.post("/step", json=big)
    assert response.status_code == 413
    detail = response.json()["detail"]
    assert detail["code"] == "MESSAGE_TOO_LARGE"
    assert detail["category"] == "client"
    # A body just under the limit still works.
    small = {"action": {"amount": 1, "metadata": {"pad": "x" * (MAX_MESSAGE_BYTES // 2)}}}
    assert http.post("/step", json=small).status_code == 200


def test_chunked_body_over_limit_is_413(http: httpx.Client) -> None:
    """Without Content-Length (chunked upload) the limit must still hold."""

    def chunks():
        yield b'{"action": {"amount": 1, "metadata": {"pad": "'
        for _ in range(4):
            yield b"x" * MAX_MESSAGE_BYTES
        yield b'"}}}'

    response = http.post("/step", content=chunks(), headers={"content-type": "application/json"})
    assert response.status_code == 413, response.status_code
