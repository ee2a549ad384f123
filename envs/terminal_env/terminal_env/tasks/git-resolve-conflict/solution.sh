#!/bin/bash
set -e
cd repo
git merge -q feature || true
printf 'notes\nfrom main\nfrom feature\n' > notes.txt
git add notes.txt
git commit -q --no-edit
