#!/bin/bash
. "$OPENENV_CHECK"
cd repo || exit 1
check ".gitignore committed" git cat-file -e HEAD:.gitignore
check "logs ignored" git check-ignore -q server.log
check "nested logs ignored" git check-ignore -q sub/debug.log
check "build/ ignored" git check-ignore -q build/out.bin
check "sources not ignored" bash -c '! git check-ignore -q src/main.py'
check "clean status" test -z "$(git status --porcelain 2>/dev/null)"
finish
