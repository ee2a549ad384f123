#!/bin/bash
. "$OPENENV_CHECK"
check "pyproject.toml names textkit 0.1.0" python3 -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; assert p["name"] == "textkit" and p["version"] == "0.1.0"'
check "setuptools backend" python3 -c 'import tomllib; assert tomllib.load(open("pyproject.toml", "rb"))["build-system"]["build-backend"].startswith("setuptools")'
check "slugify works" python3 -c 'import sys; sys.path.insert(0, "."); from textkit import slugify; assert slugify("Hello, World!") == "hello-world"; assert slugify("  A--B  c ") == "a-b-c"; assert slugify("x") == "x"'
finish
