"""``python -m chaos.faultproxy``: run the fault proxy server."""

from __future__ import annotations

import sys

from .server import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
