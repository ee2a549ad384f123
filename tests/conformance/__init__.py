"""Protocol conformance tests: real servers, raw WebSocket frames and raw HTTP."""
