#!/bin/bash
. "$OPENENV_CHECK"
cd repo || exit 1
check "four commits" test "$(git rev-list --count HEAD 2>/dev/null)" = 4
check "the bad commit is still in history" bash -c 'git log --format=%s | grep -qx "Break the config"'
check "HEAD is a revert" bash -c 'git log -1 --format=%s | grep -q "^Revert"'
check "config restored" test "$(cat config.txt 2>/dev/null)" = "$(printf 'mode=safe\nretries=3')"
check "later work kept" test -f docs.txt
check "clean tree" test -z "$(git status --porcelain 2>/dev/null)"
finish
