"""The trainer adapters import their trainer only when used: `import openenv.integrations.*`
must not pull verl (ray, torch) or skyrl_gym into a process that never uses them."""

from __future__ import annotations

import subprocess
import sys


def test_adapters_import_no_trainer() -> None:
    code = (
        "import sys\n"
        "import openenv.integrations.verl, openenv.integrations.skyrl\n"
        "import openenv.integrations.torchforge\n"
        "heavy = {'verl', 'skyrl_gym', 'torch', 'ray'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
