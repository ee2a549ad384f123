#!/bin/bash
set -e
mkdir -p repo && cd repo
git init -q -b main

echo "v1" > app.txt && git add app.txt && git commit -q -m "First version"
echo "v2" > app.txt && git commit -q -am "Second version"
