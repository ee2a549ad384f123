#!/bin/bash
set -e
mkdir -p photos
for n in 1 2 3; do echo "photo $n" > "photos/IMG_000$n.JPG"; done
echo "captions" > photos/README.TXT
