#!/bin/bash
. "$OPENENV_CHECK"
check "build.sh executable" test -x tools/build.sh
check "deploy.sh executable" test -x tools/deploy.sh
check "mode of build.sh is 755" test "$(stat -c %a tools/build.sh 2>/dev/null)" = 755
check "notes.md not executable" test ! -x tools/notes.md
check "config.env not executable" test ! -x tools/config.env
finish
