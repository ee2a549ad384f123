#!/bin/bash
set -e
{ echo "region,total"; tail -n +2 sales.csv | awk -F, '{t[$1] += $3} END {for (r in t) print r "," t[r]}' | sort; } > totals.csv
