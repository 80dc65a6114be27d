"""``python -m chaos.ramp finalize RUN_DIR``: the public entry point the Locust master runs."""

import sys

from chaos.ramp.command import main

sys.exit(main())
