#!/bin/bash
set -e
mkdir -p repo && cd repo
git init -q -b main

mkdir -p src sub build
echo "print(1)" > src/main.py && git add src && git commit -q -m "Add sources"
echo log > server.log && echo log > sub/debug.log && echo bin > build/out.bin
