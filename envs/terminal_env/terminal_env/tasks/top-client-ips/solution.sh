#!/bin/bash
set -e
awk '{print $1}' access.log | sort | uniq -c | sort -rn | head -3 | awk '{print $1, $2}' > top3.txt
