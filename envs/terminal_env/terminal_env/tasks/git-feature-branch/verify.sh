#!/bin/bash
. "$OPENENV_CHECK"
cd repo || exit 1
check "branch exists" git rev-parse --verify -q refs/heads/feature/greeting
check "greeting committed on the branch" test "$(git show feature/greeting:greeting.txt 2>/dev/null)" = "hi there"
check "branch starts from main" test "$(git merge-base main feature/greeting 2>/dev/null)" = "$(git rev-parse main 2>/dev/null)"
check "main untouched" test "$(git log --format=%s main 2>/dev/null | tr '\n' ,)" = "Second version,First version,"
check "main has no greeting.txt" bash -c '! git cat-file -e main:greeting.txt 2>/dev/null'
finish
