#!/bin/bash
. "$OPENENV_CHECK"
expected="sorted/csv/prices.csv sorted/csv/q1.csv sorted/log/app.log sorted/log/db.log sorted/txt/notes.txt sorted/txt/readme.txt sorted/txt/todo.txt"
check "every file in its folder" test "$(cd sorted 2>/dev/null && find . -type f | sed 's|^\./|sorted/|' | sort | tr '\n' ' ')" = "$expected "
check "inbox is empty" test -d inbox -a -z "$(ls -A inbox 2>/dev/null)"
check "contents unchanged" grep -qx "buy milk" sorted/txt/todo.txt
finish
