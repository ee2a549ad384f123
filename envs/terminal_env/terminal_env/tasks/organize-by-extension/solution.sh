#!/bin/bash
set -e
for f in inbox/*; do ext=${f##*.}; mkdir -p "sorted/$ext"; mv "$f" "sorted/$ext/"; done
