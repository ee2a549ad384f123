#!/bin/bash
set -e
cd repo
printf '*.log\nbuild/\n' > .gitignore
git add .gitignore
git commit -q -m "Ignore logs and build output"
