#!/bin/bash
. "$OPENENV_CHECK"
cd project || exit 1
check "a git repository" git rev-parse --git-dir
check "on branch main" test "$(git symbolic-ref --short HEAD 2>/dev/null)" = main
check "one commit" test "$(git rev-list --count HEAD 2>/dev/null)" = 1
check "message is Initial commit" test "$(git log -1 --format=%s 2>/dev/null)" = "Initial commit"
check "every file committed" test "$(git ls-files | sort | tr '\n' ' ')" = "README.md src/app.py src/util.py "
check "nothing uncommitted" test -z "$(git status --porcelain 2>/dev/null)"
finish
