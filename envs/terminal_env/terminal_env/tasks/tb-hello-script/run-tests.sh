#!/bin/bash
# Terminal-Bench runs this after the agent; TEST_DIR holds tests/. No pytest here: the tests
# run with the plain runner at the end of test_outputs.py, so no package is installed.
python3 "$TEST_DIR/test_outputs.py"
