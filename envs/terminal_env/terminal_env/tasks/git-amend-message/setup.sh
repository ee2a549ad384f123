#!/bin/bash
set -e
mkdir -p repo && cd repo
git init -q -b main

echo "home" > home.html && git add home.html && git commit -q -m "Add home page"
echo "login" > login.html && git add login.html && git commit -q -m "Add lgoin page"
