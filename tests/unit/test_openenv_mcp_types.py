"""OpenEnv 0.10's MCP types and MCP client surface, used the way OpenEnv's code uses them."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from openenv.core import protocol
from openenv.core.env_server import Action, deserialize_action_with_preprocessing, mcp_types
from openenv.core.env_server.mcp_types import (
    CallToolAction,
    JsonRpcError,
    JsonRpcErrorCode,
    JsonRpcResponse,
    ListToolsAction,
    WSMCPMessage,
    WSMCPResponse,
)
from openenv.core.mcp_client import GenericMCPObservation, MCPObservation, MCPToolClient

URL = "http://127.0.0.1:9"  # never connected to


# -- JSON-RPC helpers ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "message"),
    [
        (JsonRpcErrorCode.PARSE_ERROR, "Parse error"),
        (JsonRpcErrorCode.INVALID_REQUEST, "Invalid Request"),
        (JsonRpcErrorCode.METHOD_NOT_FOUND, "Method not found"),
        (JsonRpcErrorCode.INVALID_PARAMS, "Invalid params"),
        (JsonRpcErrorCode.INTERNAL_ERROR, "Internal error"),
        (JsonRpcErrorCode.SERVER_ERROR, "Server error"),
    ],
)
def test_error_from_code_has_the_standard_message(code, message):
    error = JsonRpcError.from_code(code)
    assert (error.code, error.message, error.data) == (int(code), message, None)


def test_error_from_code_keeps_a_given_message_and_data():
    error = JsonRpcError.from_code(JsonRpcErrorCode.INVALID_PARAMS, "no session", {"id": "s"})
    assert error.model_dump() == {"code": -32602, "message": "no session", "data": {"id": "s"}}
    with pytest.raises(ValidationError):
        JsonRpcError(code=1, message="m", extra_field=1)


def test_responses_dump_exactly_one_of_result_and_error():
    ok = JsonRpcResponse.success({"tools": []}, request_id=3)
    assert ok.model_dump() == {"jsonrpc": "2.0", "id": 3, "result": {"tools": []}}
    # A null result is still a result.
    assert JsonRpcResponse.success(None).model_dump() == {
        "jsonrpc": "2.0",
        "id": None,
        "result": None,
    }
    failed = JsonRpcResponse.error_response(
        JsonRpcErrorCode.METHOD_NOT_FOUND, data={"method": "x"}, request_id="r"
    )
    expected = {
        "jsonrpc": "2.0",
        "id": "r",
        "error": {"code": -32601, "message": "Method not found", "data": {"method": "x"}},
    }
    assert failed.model_dump() == expected
    assert json.loads(failed.model_dump_json()) == expected
    assert failed.to_wire() == expected


# -- WebSocket MCP envelopes ------------------------------------------------------------------


def test_ws_mcp_models_are_one_class_under_every_import_path():
    from openenv.core import env_server

    assert mcp_types.WSMCPMessage is protocol.WSMCPMessage is env_server.WSMCPMessage
    assert mcp_types.WSMCPResponse is protocol.WSMCPResponse is env_server.WSMCPResponse
    message = WSMCPMessage(data={"jsonrpc": "2.0", "method": "tools/list", "id": 1})
    assert message.model_dump(exclude_none=True) == {
        "type": "mcp",
        "data": {"jsonrpc": "2.0", "method": "tools/list", "id": 1},
    }
    assert WSMCPResponse(data={"result": {}}).type == "mcp"
    with pytest.raises(ValidationError):
        WSMCPMessage(data={}, unknown=1)


# -- deserialize_action_with_preprocessing --------------------------------------------------


class PickAction(Action):
    action_id: int
    tokens: list[int] = []


def test_preprocessing_parses_tool_arguments_given_as_json_text():
    action = deserialize_action_with_preprocessing(
        {"type": "call_tool", "tool_name": "add", "arguments": '{"a": 1, "b": 2}'}, Action
    )
    assert action == CallToolAction(tool_name="add", arguments={"a": 1, "b": 2})
    assert isinstance(
        deserialize_action_with_preprocessing({"type": "list_tools"}, Action), ListToolsAction
    )
    with pytest.raises(ValidationError):  # text that is not JSON is not an object
        deserialize_action_with_preprocessing(
            {"type": "call_tool", "tool_name": "add", "arguments": "{a: 1"}, Action
        )


def test_preprocessing_converts_form_values():
    action = deserialize_action_with_preprocessing(
        {"action_id": "4", "tokens": "[5, 6]"}, PickAction
    )
    assert (action.action_id, action.tokens) == (4, [5, 6])
    with pytest.raises(ValidationError):
        deserialize_action_with_preprocessing({"action_id": "four"}, PickAction)


def test_preprocessing_refuses_token_text_that_is_not_json():
    """OpenEnv turns it into an empty token list (the tokens are lost); here it is refused."""
    with pytest.raises(ValidationError):
        deserialize_action_with_preprocessing({"action_id": 1, "tokens": "5, 6"}, PickAction)


# -- MCP client surface -------------------------------------------------------------------------


def test_use_production_mode_is_a_settable_attribute():
    client = MCPToolClient(base_url=URL, mode="production")
    assert client.use_production_mode is True
    client.use_production_mode = True  # the seed FAQ's workaround
    client.use_production_mode = False
    assert client.use_production_mode is False
    assert client.mode == "production"


@pytest.mark.parametrize("mode", ["simulation", "SIMULATION", "other"])
def test_mode_other_than_production_is_refused(mode):
    with pytest.raises(ValueError, match="GenericEnvClient"):
        MCPToolClient(base_url=URL, mode=mode)


def test_environment_variable_does_not_change_an_mcp_client(monkeypatch):
    monkeypatch.setenv("OPENENV_CLIENT_MODE", "simulation")
    client = MCPToolClient(base_url=URL)
    assert (client.mode, client.use_production_mode) == ("production", True)


def test_constructor_takes_openenvs_arguments_in_its_order():
    client = MCPToolClient(URL, 5.0, 6.0, 7.0, 8.0, None, "production", 2.0, {"X-Test": "1"})
    assert (client.connect_timeout_s, client.message_timeout_s) == (5.0, 6.0)
    assert (client.ping_interval_s, client.ping_timeout_s) == (7.0, 8.0)
    assert client.max_message_size == 2 * 1024 * 1024
    assert client.headers["X-Test"] == "1"
    # Keywords too, and this package's own client options.
    client = MCPToolClient(
        base_url=URL, websocket_ping_interval_s=None, headers={"A": "b"}, resume=False
    )
    assert (client.ping_interval_s, client.headers["A"], client.resume) == (None, "b", False)
    assert client._tools_cache is None and client._production_session_id is None
    assert GenericMCPObservation is MCPObservation
