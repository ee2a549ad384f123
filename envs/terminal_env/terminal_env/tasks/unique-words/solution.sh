#!/bin/bash
set -e
tr 'A-Z' 'a-z' < words.txt | sort -u > unique.txt
