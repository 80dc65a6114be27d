"""``python -m chaos.cli <command>``: the same as ``proctor <command>``."""

import sys

from chaos.cli import main

sys.exit(main())
