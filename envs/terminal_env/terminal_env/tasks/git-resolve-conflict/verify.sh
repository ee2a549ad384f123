#!/bin/bash
. "$OPENENV_CHECK"
cd repo || exit 1
check "on main" test "$(git symbolic-ref --short HEAD 2>/dev/null)" = main
check "HEAD is a merge of feature" test "$(git rev-parse HEAD^2 2>/dev/null)" = "$(git rev-parse feature 2>/dev/null)"
check "notes.txt resolved" test "$(cat notes.txt 2>/dev/null)" = "$(printf 'notes\nfrom main\nfrom feature')"
check "no conflict markers" bash -c '! grep -q -e "^<<<<<<<" -e "^>>>>>>>" -e "^=======" notes.txt'
check "merge finished" bash -c '! test -f .git/MERGE_HEAD && test -z "$(git status --porcelain)"'
finish
