"""Integration tests share the unit tests' loopback helpers (netsupport: free_port, REPO)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
