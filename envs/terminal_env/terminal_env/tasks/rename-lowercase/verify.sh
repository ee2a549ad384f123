#!/bin/bash
. "$OPENENV_CHECK"
check "lower-case names" test "$(ls photos 2>/dev/null | tr '\n' ' ')" = "img_0001.jpg img_0002.jpg img_0003.jpg readme.txt "
check "contents kept" grep -qx "photo 2" photos/img_0002.jpg
finish
