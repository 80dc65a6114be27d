"""`proctor check` on a stored run folder needs only the harness: it imports no stack module
but the component model, which is standard library only so that the harness can read
component names without the stack's dependencies (stack/components.py)."""

from __future__ import annotations

import json
import subprocess
import sys

STDLIB_ONLY_STACK = ["stack", "stack.components"]


def _imported_after(code: str) -> dict[str, list[str]]:
    probe = (f"import json, sys; before = set(sys.modules); {code}; "
             "new = sorted(set(sys.modules) - before); "
             "print(json.dumps({'stack': [m for m in new if m == 'stack' or m.startswith('stack.')], "
             "'top': sorted({m.split('.')[0] for m in new})}))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def test_offline_check_imports_no_stack_module_but_the_component_model() -> None:
    imported = _imported_after("import chaos.analyze, chaos.report, chaos.checkers")
    assert sorted(imported["stack"]) == STDLIB_ONLY_STACK


def test_the_component_model_needs_nothing_beyond_the_standard_library() -> None:
    imported = _imported_after("import stack.components")
    assert [m for m in imported["top"] if m not in sys.stdlib_module_names and m != "stack"] == []
    assert sorted(imported["stack"]) == STDLIB_ONLY_STACK


def test_the_shared_cli_modules_need_nothing_beyond_the_standard_library() -> None:
    """stack/cli_args.py and stack/cli_output.py serve the stack's commands and the harness's alike."""
    imported = _imported_after("import stack.cli_args, stack.cli_output")
    assert [m for m in imported["top"] if m not in sys.stdlib_module_names and m != "stack"] == []
