"""A function or class defined twice in one scope: the second silently replaces the first
(a merge once left two ``LaneConfig.from_settings``, and the negative controls stopped biting)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("stack", "chaos", "loadtests", "tests")
ALLOWED_DECORATORS = ("overload", "setter", "deleter", "register")


def redefinitions(source: str, filename: str = "<source>") -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if not isinstance(node, (ast.Module, ast.ClassDef)):
            continue
        seen: dict[str, int] = {}
        for item in node.body:
            if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if any(word in ast.unparse(d) for d in item.decorator_list for word in ALLOWED_DECORATORS):
                continue
            if item.name in seen:
                found.append(f"{filename}:{item.lineno} redefines {item.name} (line {seen[item.name]})")
            seen[item.name] = item.lineno
    return found


def test_no_function_or_class_is_defined_twice_in_one_scope() -> None:
    found = [hit for folder in FOLDERS for path in sorted((ROOT / folder).rglob("*.py"))
             for hit in redefinitions(path.read_text(), str(path.relative_to(ROOT)))]
    assert found == []


def test_the_walk_sees_a_method_defined_twice() -> None:
    source = "class A:\n    def f(self): ...\n    def g(self): ...\n    def f(self): ...\n"
    assert redefinitions(source) == ["<source>:4 redefines f (line 2)"]
    assert redefinitions("class A:\n    @property\n    def f(self): ...\n    @f.setter\n    def f(self, v): ...\n") == []
