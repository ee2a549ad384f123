#!/bin/bash
set -e
python3 -c 'import json; users = json.load(open("users.json")); print("\n".join(sorted(u["name"] for u in users if u["active"] and u["age"] >= 30)))' > active.txt
