"""Each shared thing is defined once (issue #20, item 5), found by walking the source.

A finder names the places (file:line) that define one thing; exactly one module may hold them.
Each finder also has a negative control: a planted second definition is found.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterator

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT_AND_HARNESS = ("stack", "chaos", "loadtests")
EVERYWHERE = (*PRODUCT_AND_HARNESS, "tests")

@dataclass(frozen=True)
class Facts:
    """What one walk of a module finds: string constants, function names, string collections."""

    strings: list[tuple[int, str]] = field(default_factory=list)
    functions: list[tuple[int, str]] = field(default_factory=list)
    collections: list[tuple[int, frozenset[str]]] = field(default_factory=list)  # __all__ excluded
    dict_keys: list[tuple[int, frozenset[str]]] = field(default_factory=list)


def _strings(nodes: list) -> frozenset[str]:
    return frozenset(e.value for e in nodes if isinstance(e, ast.Constant) and isinstance(e.value, str))


def facts_of(source: str) -> Facts:
    tree = ast.parse(source)
    exports = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Assign)
               and any(isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets)}
    facts = Facts()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            facts.strings.append((node.lineno, node.value))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            facts.functions.append((node.lineno, node.name))
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)) and id(node) not in exports:
            facts.collections.append((node.lineno, _strings(node.elts)))
        elif isinstance(node, ast.Dict):
            facts.dict_keys.append((node.lineno, _strings(node.keys)))
    return facts


Finder = Callable[[Facts], Iterator[int]]


def _constants(accept: Callable[[str], bool]) -> Finder:
    return lambda facts: (line for line, value in facts.strings if accept(value))


def _functions(name: str) -> Finder:
    return lambda facts: (line for line, defined in facts.functions if defined == name)


def _exact_collections(names: frozenset[str]) -> Finder:
    """A tuple, list, set or dict (its keys) of exactly ``names``."""
    return lambda facts: (line for line, found in (*facts.collections, *facts.dict_keys) if found == names)


def _string_collections(min_names: int, names: frozenset[str]) -> Finder:
    """A tuple, list or set literal of at least ``min_names`` of ``names`` (an ``__all__`` is not one)."""
    return lambda facts: (line for line, found in facts.collections if len(found & names) >= min_names)


STAMP = "%Y%m%d" + "T%H%M%S"  # two constants, so this file does not define one itself
EXPORTED = frozenset({"attempts", "answers", "answer_revisions", "outbox", "outcomes", "exams",
                      "ai_reservations", "audit_log", "alerts", "lane_state"})

# thing -> (finder, folders searched, the one file that defines it)
THINGS: dict[str, tuple[Finder, tuple[str, ...], str]] = {
    "answer options": (_constants(lambda s: s == "ABCD"), PRODUCT_AND_HARNESS,
                       "stack/ledger/grading.py"),
    "free ports": (_functions("free_port"), EVERYWHERE, "stack/deploy/ports.py"),
    "run-folder name": (_constants(lambda s: STAMP in s), EVERYWHERE, "stack/paths.py"),
    "run-folder maker": (_functions("new_run_dir"), EVERYWHERE, "stack/paths.py"),
    "latest link": (_functions("update_latest_link"), EVERYWHERE, "stack/paths.py"),
    "latest name": (_constants(lambda s: s == "latest"), PRODUCT_AND_HARNESS, "stack/paths.py"),
    "provider header X-Received-At": (_constants(lambda s: s.lower() == "x-received-at"),
                                      PRODUCT_AND_HARNESS, "stack/headers.py"),
    "admin token header": (_constants(lambda s: s.lower() == "x-admin-token"), PRODUCT_AND_HARNESS,
                           "stack/headers.py"),
    "admin authentication": (_functions("admin_allowed"), PRODUCT_AND_HARNESS, "stack/admin_auth.py"),
    "export tables": (_string_collections(5, EXPORTED), PRODUCT_AND_HARNESS, "stack/ledger/export_names.py"),
    "answer op fields": (_exact_collections(frozenset({"attempt_id", "question", "content", "idempotency_key"})),
                         PRODUCT_AND_HARNESS, "chaos/ops/answers.py"),
}


@lru_cache(maxsize=None)
def _facts(path: Path, mtime_ns: int) -> Facts:
    return facts_of(path.read_text())


def definitions(finder: Finder, folders: tuple[str, ...], root: Path = ROOT) -> list[str]:
    found = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            found += [f"{path.relative_to(root)}:{line}" for line in finder(_facts(path, path.stat().st_mtime_ns))]
    return found


@pytest.mark.parametrize("thing", sorted(THINGS))
def test_each_shared_thing_is_defined_once(thing):
    finder, folders, home = THINGS[thing]
    found = definitions(finder, folders)
    assert found and {place.split(":")[0] for place in found} == {home}, found  # one module defines it


@pytest.mark.parametrize("thing", sorted(THINGS))
def test_a_second_definition_is_found(thing, tmp_path):
    # Negative control: the home file plus a planted copy of it elsewhere makes two.
    finder, folders, home = THINGS[thing]
    copy = (ROOT / home).read_text()
    for rel in (home, f"{folders[0]}/elsewhere/copy.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(copy)
    assert len({place.split(":")[0] for place in definitions(finder, folders, tmp_path)}) == 2


def test_every_export_table_has_its_reader_in_the_same_order():
    from stack.ledger.export_names import EXPORT_TABLE_NAMES
    from stack.ledger.exports import EXPORT_TABLES

    assert tuple(EXPORT_TABLES) == EXPORT_TABLE_NAMES
    assert set(EXPORT_TABLE_NAMES) == EXPORTED
