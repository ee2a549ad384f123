#!/bin/bash
. "$OPENENV_CHECK"
# Mode bits, not `test -x`: the workspace may be on a noexec mount (Docker's default /tmp).
x_bits() { local mode; mode=$(stat -c %a "$1" 2>/dev/null) && echo $((8#$mode & 8#111)); }
executable() { test "$(x_bits "$1")" = $((8#111)); }
not_executable() { test "$(x_bits "$1")" = 0; }
check "build.sh executable" executable tools/build.sh
check "deploy.sh executable" executable tools/deploy.sh
check "mode of build.sh is 755" test "$(stat -c %a tools/build.sh 2>/dev/null)" = 755
check "notes.md not executable" not_executable tools/notes.md
check "config.env not executable" not_executable tools/config.env
finish
