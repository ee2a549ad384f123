#!/bin/bash
. "$OPENENV_CHECK"
check "unique.txt is right" test "$(cat unique.txt 2>/dev/null)" = "$(printf 'apple\nbanana\ncherry\ndate')"
finish
