#!/bin/bash
. "$OPENENV_CHECK"
check "top3.txt ranks the clients" test "$(sed 's/^ *//' top3.txt 2>/dev/null)" = "$(printf '9 10.0.0.5\n6 192.168.1.20\n4 172.16.0.3')"
finish
