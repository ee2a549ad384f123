#!/bin/bash
python3 "$TEST_DIR/test_outputs.py"
