#!/bin/bash
# Terminal-Bench tasks prepare /app in their Dockerfile; here setup.sh does it.
cat > book.txt <<'TEXT'
The cat sat on the mat. The dog sat on the log!
A cat and a dog: the best of friends? The cat thinks so.
On Monday the dog ran; on Tuesday the cat ran. Cat, cat, CAT.
TEXT
