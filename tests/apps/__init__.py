"""Small environments served by the conformance tests (`uvicorn apps.<module>:app`)."""
