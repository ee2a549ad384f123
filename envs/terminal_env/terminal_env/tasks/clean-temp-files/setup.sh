#!/bin/bash
set -e
mkdir -p project/src/cache project/docs
touch project/a.tmp project/src/b.tmp project/src/cache/c.tmp project/docs/d.tmp
echo main > project/src/main.py
echo doc > project/docs/index.md
echo keep > project/src/cache/keep.dat
echo tmp > project/template.tmpl
