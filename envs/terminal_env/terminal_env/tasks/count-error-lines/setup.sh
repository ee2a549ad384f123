#!/bin/bash
set -e
mkdir -p logs
python3 - <<'EOF'
import random
rng = random.Random(7)
levels = ["INFO"] * 20 + ["WARN"] * 6 + ["ERROR"] * 7 + ["error-free DEBUG"] * 3
rng.shuffle(levels)
with open("logs/app.log", "w") as out:
    for i, level in enumerate(levels):
        out.write(f"2024-01-01 10:{i:02d}:00 {level} request {i}\n")
EOF
