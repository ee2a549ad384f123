#!/bin/bash
set -e
mkdir -p inbox
echo "buy milk" > inbox/todo.txt
echo "read me" > inbox/readme.txt
echo "ideas" > inbox/notes.txt
printf 'item,price\ntea,3\n' > inbox/prices.csv
printf 'q,total\n1,100\n' > inbox/q1.csv
echo "started" > inbox/app.log
echo "connected" > inbox/db.log
