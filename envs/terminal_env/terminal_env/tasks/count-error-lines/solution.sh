#!/bin/bash
set -e
grep -c ERROR logs/app.log > answer.txt
