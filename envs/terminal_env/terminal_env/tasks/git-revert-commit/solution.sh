#!/bin/bash
set -e
cd repo
git revert --no-edit "$(git log --format='%H %s' | awk '$2 == "Break" {print $1}')"
