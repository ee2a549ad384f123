#!/bin/bash
set -e
mkdir -p project/src
echo "# Project" > project/README.md
echo "print('app')" > project/src/app.py
echo "def util(): pass" > project/src/util.py
