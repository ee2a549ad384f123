#!/bin/bash
. "$OPENENV_CHECK"
check "large.txt lists exactly the large files" test "$(cat large.txt 2>/dev/null)" = "$(printf 'data/archive/old.bin\ndata/big.bin\ndata/media/deep/clip.raw')"
finish
