#!/bin/bash
. "$OPENENV_CHECK"
check "answer.txt holds the count" test "$(tr -d ' \n' < answer.txt 2>/dev/null)" = 7
finish
