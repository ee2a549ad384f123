import sys

from openenv.core.harness.capture.server import main

sys.exit(main())
