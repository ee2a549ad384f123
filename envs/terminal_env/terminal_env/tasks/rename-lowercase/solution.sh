#!/bin/bash
set -e
cd photos
for f in *; do lower=$(echo "$f" | tr 'A-Z' 'a-z'); [ "$f" = "$lower" ] || mv "$f" "$lower"; done
