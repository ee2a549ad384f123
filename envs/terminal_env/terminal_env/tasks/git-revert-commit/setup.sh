#!/bin/bash
set -e
mkdir -p repo && cd repo
git init -q -b main

printf 'mode=safe\nretries=3\n' > config.txt && git add config.txt && git commit -q -m "Add config"
printf 'mode=unsafe\nretries=3\n' > config.txt && git commit -q -am "Break the config"
echo "docs" > docs.txt && git add docs.txt && git commit -q -m "Add docs"
