#!/bin/bash
. "$OPENENV_CHECK"
check "hello.txt exists" test -f hello.txt
check "hello.txt holds the greeting" test "$(cat hello.txt 2>/dev/null)" = "Hello, world!"
check "a single line" test "$(wc -l < hello.txt 2>/dev/null)" -eq 1
finish
