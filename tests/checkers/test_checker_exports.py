"""Every checker module says what it exports (issue #20, item 7): ``__all__`` is present, names
only what the module defines or re-exports, lists each public function and class it defines, and
has no duplicates. A checker's contract is its ``check_*`` function; ``__all__`` is how a reader
(and ``from chaos.checkers.x import *``) finds it."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

CHECKERS_DIR = Path(__file__).resolve().parents[2] / "chaos" / "checkers"
MODULES = sorted(path.stem for path in CHECKERS_DIR.glob("*.py"))


def export_problems(source: str, module: object) -> list[str]:
    """What is wrong with a module's ``__all__``, given its source and the imported module."""
    exported = getattr(module, "__all__", None)
    if exported is None:
        return ["no __all__"]
    problems = [f"{name} listed twice" for name in sorted(set(exported)) if list(exported).count(name) > 1]
    problems += [f"{name} in __all__ but not defined" for name in exported if not hasattr(module, name)]
    defined = [node.name for node in ast.parse(source).body
               if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not node.name.startswith("_")]
    problems += [f"{name} defined but not in __all__" for name in defined if name not in exported]
    return problems


@pytest.mark.parametrize("name", MODULES)
def test_every_checker_module_exports_what_it_defines(name):
    module = importlib.import_module(f"chaos.checkers{'' if name == '__init__' else '.' + name}")
    assert export_problems((CHECKERS_DIR / f"{name}.py").read_text(), module) == []


def test_a_missing_or_wrong_all_is_reported():
    # Negative control: each kind of problem is seen.
    class Module:
        __all__ = ["check_x", "check_x", "gone"]
        check_x = staticmethod(lambda: None)

    source = "def check_x(): ...\ndef check_y(): ...\ndef _private(): ...\n"
    assert export_problems(source, Module()) == [
        "check_x listed twice", "gone in __all__ but not defined", "check_y defined but not in __all__"]
    assert export_problems("", object()) == ["no __all__"]
