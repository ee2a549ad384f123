#!/bin/bash
set -e
cd repo
git commit -q --amend -m "Add login page"
