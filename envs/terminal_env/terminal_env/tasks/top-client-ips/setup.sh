#!/bin/bash
set -e
python3 - <<'EOF'
import random
counts = {"10.0.0.5": 9, "192.168.1.20": 6, "172.16.0.3": 4, "10.0.0.9": 2, "8.8.8.8": 1}
lines = [ip for ip, n in counts.items() for _ in range(n)]
random.Random(3).shuffle(lines)
with open("access.log", "w") as out:
    for i, ip in enumerate(lines):
        out.write(f'{ip} - - [01/Jan/2024:10:00:{i:02d}] "GET /page/{i} HTTP/1.1" 200 512\n')
EOF
