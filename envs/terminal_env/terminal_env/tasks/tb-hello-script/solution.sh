#!/bin/bash
set -e
echo 'print("Hello, world!")' > hello.py
printf '#!/bin/bash\npython3 "$(dirname "$0")/hello.py"\n' > greet.sh
chmod +x greet.sh
