#!/bin/bash
. "$OPENENV_CHECK"
check "port is 9090" grep -qx 'port = 9090' config.ini
check "debug is false" grep -qx 'debug = false' config.ini
check "other lines kept" test "$(grep -v -e '^port' -e '^debug' config.ini)" = "$(grep -v -e '^port' -e '^debug' "$TASK_DIR/files/config.ini")"
finish
