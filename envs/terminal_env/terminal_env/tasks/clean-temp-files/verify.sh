#!/bin/bash
. "$OPENENV_CHECK"
check "no .tmp files left" test -z "$(find project -name '*.tmp' 2>/dev/null)"
check "other files kept" test "$(find project -type f | wc -l)" -eq 4
finish
