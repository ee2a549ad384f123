#!/bin/bash
. "$OPENENV_CHECK"
check "active.txt lists the right users" test "$(cat active.txt 2>/dev/null)" = "$(printf 'Ada\nGrace\nKaren')"
finish
