#!/bin/bash
. "$OPENENV_CHECK"
cd repo || exit 1
check "message fixed" test "$(git log -1 --format=%s 2>/dev/null)" = "Add login page"
check "still two commits" test "$(git rev-list --count HEAD 2>/dev/null)" = 2
check "same files" test "$(git ls-tree -r --name-only HEAD 2>/dev/null | tr '\n' ,)" = "home.html,login.html,"
check "same content" test "$(git show HEAD:login.html 2>/dev/null)" = login
finish
