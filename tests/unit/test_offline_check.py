"""`proctor check` on a stored run folder needs only the harness: it imports no stack module."""

from __future__ import annotations

import subprocess
import sys


def test_offline_check_imports_no_stack_module() -> None:
    code = ("import sys, chaos.analyze, chaos.report, chaos.checkers; "
            "print(sorted(m for m in sys.modules if m == 'stack' or m.startswith('stack.')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
