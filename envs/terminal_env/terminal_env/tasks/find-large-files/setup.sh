#!/bin/bash
set -e
mkdir -p data/archive data/media/deep data/docs
head -c 20000 /dev/zero > data/big.bin
head -c 10240 /dev/zero > data/exactly.bin
head -c 50000 /dev/zero > data/archive/old.bin
head -c 12000 /dev/zero > data/media/deep/clip.raw
head -c 100 /dev/zero > data/docs/small.txt
head -c 9000 /dev/zero > data/media/thumb.png
