#!/bin/bash
set -e
printf 'calc: src/main.c src/mathx.c src/mathx.h\n\tgcc -O2 -o calc src/main.c src/mathx.c\n' > Makefile
make
