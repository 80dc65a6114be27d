"""A small AST mutation tester for the checkers (not a test module: pytest does not collect it).

    .venv/bin/python tests/checkers/mutate.py chaos/checkers/faults.py [more modules] \
        [--tests tests/checkers tests/unit/test_history.py] [--limit-seconds 1200]

For each module, every mutable AST node gives one mutant (``continue`` -> ``break``,
comparison and boolean operators swapped, ``not`` dropped, True/False flipped,
integers +1, ``+``/``-`` swapped). The mutant is written over the module, the tests
run in a child forked from a parent that has already imported pytest (so a mutant
costs a test run, not an interpreter start), and the original is always restored.
A mutant survives when the tests still pass. Prints one line per survivor, then
mutants / killed / survived / score per module.
"""

from __future__ import annotations

import argparse
import ast
import copy
import os
import signal
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

sys.dont_write_bytecode = True  # a mutant must never be served from a stale .pyc of another

_COMPARE_SWAP = {ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
                 ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
_BINOP_SWAP = {ast.Add: ast.Sub, ast.Sub: ast.Add}


def _sites(tree: ast.AST) -> Iterator[tuple[ast.AST, str]]:
    """Every node a mutation applies to, with a description of the mutation."""
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and node.body
                  and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Continue):
            yield node, "continue -> break"
        elif isinstance(node, ast.Compare):
            for index, op in enumerate(node.ops):
                if type(op) in _COMPARE_SWAP:
                    yield node, f"compare[{index}] {type(op).__name__} -> {_COMPARE_SWAP[type(op)].__name__}"
        elif isinstance(node, ast.BoolOp):
            yield node, f"{type(node.op).__name__} -> {'Or' if isinstance(node.op, ast.And) else 'And'}"
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            yield node, "not x -> x"
        elif isinstance(node, ast.BinOp) and type(node.op) in _BINOP_SWAP:
            yield node, f"{type(node.op).__name__} -> {_BINOP_SWAP[type(node.op)].__name__}"
        elif isinstance(node, ast.Constant) and id(node) not in docstrings:
            if isinstance(node.value, bool):
                yield node, f"{node.value} -> {not node.value}"
            elif isinstance(node.value, int):
                yield node, f"{node.value} -> {node.value + 1}"


def _apply(tree: ast.Module, target: int) -> tuple[ast.Module, str, int]:
    """A copy of tree with the target-th mutation applied; returns (tree, description, line)."""
    mutated = copy.deepcopy(tree)
    for number, (node, what) in enumerate(_sites(mutated)):
        if number != target:
            continue
        if isinstance(node, ast.Continue):
            _replace(mutated, node, ast.Break())
        elif isinstance(node, ast.Compare):
            index = int(what.split("[")[1].split("]")[0])
            node.ops[index] = _COMPARE_SWAP[type(node.ops[index])]()
        elif isinstance(node, ast.BoolOp):
            node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        elif isinstance(node, ast.UnaryOp):
            _replace(mutated, node, node.operand)
        elif isinstance(node, ast.BinOp):
            node.op = _BINOP_SWAP[type(node.op)]()
        elif isinstance(node.value, bool):
            node.value = not node.value
        else:
            node.value = node.value + 1
        return mutated, what, getattr(node, "lineno", 0)
    raise IndexError(target)


def _replace(tree: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for parent in ast.walk(tree):
        for name, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, name, ast.copy_location(new, old))
            elif isinstance(value, list) and any(item is old for item in value):
                value[[id(item) for item in value].index(id(old))] = ast.copy_location(new, old)


def _tests_pass(tests: list[str], timeout: float) -> bool:
    pid = os.fork()
    if pid == 0:  # child: fresh imports of the project, pytest already loaded
        for name in [m for m in sys.modules if m.startswith(("chaos", "tests", "checker_builders", "test_"))]:
            del sys.modules[name]
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        code = pytest.main(["-x", "-q", "-p", "no:cacheprovider", *tests])
        os._exit(int(code))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status) == 0
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return False  # a hang is a detected mutant


def mutate_module(path: Path, tests: list[str], deadline: float, timeout: float) -> tuple[int, int, list[str]]:
    original = path.read_text(encoding="utf-8")
    tree = ast.parse(original)
    total = sum(1 for _ in _sites(tree))
    killed, survivors = 0, []
    try:
        for target in range(total):
            if time.monotonic() > deadline:
                print(f"{path}: time box reached after {target} of {total} mutants", flush=True)
                return target, killed, survivors
            mutated, what, line = _apply(tree, target)
            path.write_text(ast.unparse(mutated) + "\n", encoding="utf-8")
            if _tests_pass(tests, timeout):
                survivors.append(f"{path}:{line}: {what}")
                print(f"SURVIVED {path}:{line}: {what}", flush=True)
            else:
                killed += 1
    finally:
        path.write_text(original, encoding="utf-8")
    return total, killed, survivors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="+", type=Path)
    parser.add_argument("--tests", nargs="+", default=["tests/checkers"])
    parser.add_argument("--limit-seconds", type=float, default=1200.0, help="time box over all modules")
    parser.add_argument("--timeout", type=float, default=120.0, help="per mutant")
    args = parser.parse_args()
    if not _tests_pass(args.tests, args.timeout):
        print("the tests fail without any mutation: fix them first", file=sys.stderr)
        return 2
    deadline = time.monotonic() + args.limit_seconds
    rows = []
    for module in args.modules:
        total, killed, survivors = mutate_module(module, args.tests, deadline, args.timeout)
        rows.append((module, total, killed, len(survivors)))
    for module, total, killed, survived in rows:
        score = f"{100 * killed / total:.1f}%" if total else "-"
        print(f"{module}: mutants {total} killed {killed} survived {survived} score {score}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
