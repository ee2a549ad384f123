#!/bin/bash
set -e
cd repo
git checkout -q -b feature/greeting
echo "hi there" > greeting.txt
git add greeting.txt
git commit -q -m "Add greeting"
