#!/bin/bash
. "$OPENENV_CHECK"
check "Makefile exists" test -f Makefile
rm -f calc
check "make builds ./calc" make
check "calc prints the sum" test "$(./calc 2>/dev/null)" = "sum=15"
finish
