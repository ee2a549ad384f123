#!/bin/bash
set -e
tr 'A-Z' 'a-z' < book.txt | grep -oE '[a-z]+' | sort | uniq -c \
  | awk '{print $2 "," $1}' | sort -t, -k2,2nr -k1,1 | head -5 > freq.txt
