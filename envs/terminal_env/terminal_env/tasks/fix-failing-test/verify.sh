#!/bin/bash
. "$OPENENV_CHECK"
# The reference copy of the tests, run against the workspace's stats.py.
reference=$(mktemp -d)
cp "$TASK_DIR/files/test_stats.py" "$reference/"
check "the original tests pass" bash -c "cd '$reference' && PYTHONPATH='$WORKSPACE' python3 -m unittest test_stats"
check "test file unchanged" cmp -s test_stats.py "$TASK_DIR/files/test_stats.py"
finish
