#!/bin/bash
set -e
mkdir -p repo && cd repo
git init -q -b main

echo "notes" > notes.txt && git add notes.txt && git commit -q -m "Start notes"
git checkout -q -b feature
echo "from feature" >> notes.txt && git commit -q -am "Feature note"
git checkout -q main
echo "from main" >> notes.txt && git commit -q -am "Main note"
