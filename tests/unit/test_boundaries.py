"""Import boundaries between the parts of Proctor, as a test (issue #8, item 9).

A small AST walk rather than import-linter: the rules need about sixty lines and no
extra dependency, "only the standard library" is a predicate (``sys.stdlib_module_names``)
rather than a list of forbidden packages, and the walk counts every import: inside
functions, in ``TYPE_CHECKING`` blocks, and ``importlib.import_module`` with a literal
name.  Each rule has a self-test that plants a violation in a throwaway tree and checks
the walk reports it with file and line.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Callable, Iterator

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module a ``from ... import`` names (relative levels resolved)."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    base = base[: len(base) - node.level + (1 if is_package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def _literal_import(node: ast.Call) -> str | None:
    # importlib.import_module("x.y") / __import__("x.y") with a constant name.
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name in ("import_module", "__import__") and node.args:
        first = node.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            return first.value
    return None


def imports_of(path: Path, root: Path) -> Iterator[tuple[int, str]]:
    """(line, absolute module) for every import in ``path``, however nested."""
    module = _module_name(path, root)
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            yield node.lineno, _resolve(node, module, is_package)
        elif isinstance(node, ast.Call) and (name := _literal_import(node)) is not None:
            yield node.lineno, name


def _top(name: str) -> str:
    return name.split(".")[0]


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


@dataclass(frozen=True)
class Rule:
    """Files under ``folder`` must not import a module ``forbidden`` accepts."""

    name: str
    folder: str
    forbidden: Callable[[str], bool]
    files: str = "*.py"  # which files under ``folder`` the rule holds for

    def violations(self, root: Path) -> list[str]:
        found = []
        for path in sorted((root / self.folder).rglob(self.files)):
            for line, name in imports_of(path, root):
                if self.forbidden(name):
                    found.append(f"{path.relative_to(root)}:{line} imports {name}")
        return found


RULES = [
    Rule("the stack never imports the harness or the load tests", "stack",
         lambda name: _top(name) in ("chaos", "loadtests")),
    Rule("checkers never import the stack", "chaos/checkers",
         lambda name: _top(name) == "stack"),
    Rule("the fault proxy imports only the standard library and itself", "chaos/faultproxy",
         lambda name: not (_top(name) in sys.stdlib_module_names or _top(name) == "__future__"
                           or _within(name, "chaos.faultproxy"))),
    Rule("the harness never imports locust (gevent patches the process)", "chaos",
         lambda name: _top(name) == "locust"),
    Rule("the ledger never imports the lanes, rq or redis", "stack/ledger",
         lambda name: _within(name, "stack.lanes") or _top(name) in ("rq", "redis")),
    Rule("the compose deployment never imports the embedded deployment", "chaos/deployment",
         lambda name: _within(name, "stack.embedded") or _within(name, "chaos.deployment.embedded"),
         files="compose*.py"),
]
_IDS = [rule.folder for rule in RULES]


@pytest.mark.parametrize("rule", RULES, ids=_IDS)
def test_boundary_holds(rule: Rule) -> None:
    assert (ROOT / rule.folder).is_dir()
    assert rule.violations(ROOT) == [], rule.name


# --- self-tests: each rule catches a planted violation --------------------------------
_PLANTED = {
    "stack": ("stack/lanes/bad.py", "def later():\n    from chaos.history import Op\n",
              "stack/lanes/bad.py:2 imports chaos.history"),
    "chaos/checkers": ("chaos/checkers/bad.py", "import stack.config as cfg\n",
                       "chaos/checkers/bad.py:1 imports stack.config"),
    "chaos/faultproxy": ("chaos/faultproxy/bad.py", "import os\nfrom ..history import Op\n",
                         "chaos/faultproxy/bad.py:2 imports chaos.history"),
    "chaos": ("chaos/bad.py", "import importlib\nimportlib.import_module('locust.env')\n",
              "chaos/bad.py:2 imports locust.env"),
    "stack/ledger": ("stack/ledger/bad.py", "from stack.ledger import outbox\nfrom stack.lanes.queues import job_id\n",
                     "stack/ledger/bad.py:2 imports stack.lanes.queues"),
    "chaos/deployment": ("chaos/deployment/compose_bad.py", "from stack.deploy.links import UPSTREAM_OF\n"
                         "def later():\n    from stack.embedded.links import LinkManager\n",
                         "chaos/deployment/compose_bad.py:3 imports stack.embedded.links"),
}


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in path.relative_to(tmp_path).parents:
            (tmp_path / parent / "__init__.py").touch()
        path.write_text(text)
    return tmp_path


_CLEAN = {  # allowed imports only: every rule must report nothing on this tree
    "stack/lanes/ok.py": "import redis\nfrom stack.config import X\nfrom . import queues\n",
    "chaos/checkers/ok.py": "from chaos.history import Op\nfrom .base import compose\n",
    "chaos/faultproxy/ok.py": "from __future__ import annotations\nimport asyncio\n"
                              "from .link import Link\nfrom . import stage\n",
    "chaos/ok.py": "import subprocess\nsubprocess.run(['locust', '-f', 'x.py'])\n",
    "stack/ledger/ok.py": "from sqlalchemy import select\nfrom stack.ledger.outbox import operation_id\n",
    "chaos/deployment/compose_ok.py": "from stack.deploy.ports import free_ports\nfrom .final_read import final_read\n",
    "chaos/deployment/embedded_ok.py": "from stack.embedded.stack import EmbeddedStack\n",  # not a compose file
}


@pytest.mark.parametrize("rule", RULES, ids=_IDS)
def test_rule_catches_a_planted_violation(rule: Rule, tmp_path: Path) -> None:
    root = _tree(tmp_path, _CLEAN)
    assert rule.violations(root) == []  # negative control: allowed imports pass
    rel, text, expected = _PLANTED[rule.folder]
    _tree(tmp_path, {rel: text})
    assert rule.violations(root) == [expected]


def test_relative_imports_resolve_against_the_package() -> None:
    node = ast.parse("from ..history import Op").body[0]
    assert isinstance(node, ast.ImportFrom)
    assert _resolve(node, "chaos.faultproxy.link", is_package=False) == "chaos.history"
    assert _resolve(node, "chaos.faultproxy", is_package=True) == "chaos.history"


# --- production code never reads a control (issue #20, item 8) -------------------------------
# Each control (stack.controls.Controls, apart from the product's Settings) is read once, at start-up,
# by the function that turns it into a policy object; a read anywhere else is a control branching in
# product code. The selector branches on it and never hands the flag on to product code as a parameter
# (``RequestLimiter(enabled=...)`` was that): only the values that *are* a policy's parameter are passed.
CONTROL_READERS: dict[str, set[str]] = {
    "rate_limits": {"stack/web/app.py:_request_limiter"},
    "reconciler_enabled": {"stack/relay.py:relay_passes"},
    "relay_mark_early": {"stack/relay.py:send_and_mark_policy"},
    "sms_idempotency": {"stack/lanes/jobs.py:sms_call"},
    "valkey_fresh_connections": {"stack/valkey_client.py:connection_policy"},
    "answer_write_behind": {"stack/web/app.py:_answer_sink"},
    "answer_revisions": {"stack/web/app.py:_answer_sink"},
    "answer_sink": {"stack/web/app.py:_answer_sink"},
    "shared_lane": {"stack/lanes/queues.py:lane_routes"},
    "ai_shared_limiter": {"stack/lanes/ai/job.py:LaneConfig.from_settings"},
    "ai_retry_after": {"stack/lanes/ai/job.py:LaneConfig.from_settings"},
    "ai_ask_before_replay": {"stack/lanes/ai/job.py:LaneConfig.from_settings"},
    "allow_default_secrets": {"stack/config.py:insecure_secrets"},
}
PASSED_ON = {  # a control whose value is the policy's own parameter, not a flag
    "answer_write_behind": "WriteBehind's delay (seconds between the reply and the commit)",
    "answer_revisions": "the name revision_policy looks up",
}
CONTROLS_PLUMBING = {"stack/config.py:Settings.with_overrides", "stack/config.py:Settings.to_env"}
"""Where ``Settings.controls`` itself may be read besides the selectors: carrying it, not deciding on it."""


def _passed_as_argument(node: ast.AST) -> Iterator[ast.AST]:
    """The expressions a call hands on as arguments (positional or keyword)."""
    if isinstance(node, ast.Call):
        yield from node.args
        yield from (keyword.value for keyword in node.keywords)


def control_reads(path: Path, root: Path, controls: frozenset[str]) -> Iterator[tuple[str, str, bool]]:
    """(control, "file:Qualified.function", handed on as an argument) for every ``<x>.<control>``
    read in ``path``; ``<x>.controls`` counts as a read of the name "controls"."""
    rel = path.relative_to(root).as_posix()
    names = controls | {"controls"}
    tree = ast.parse(path.read_text(), str(path))
    arguments = {id(arg) for node in ast.walk(tree) for arg in _passed_as_argument(node)}

    def visit(node: ast.AST, scope: tuple[str, ...]) -> Iterator[tuple[str, str, bool]]:
        for child in ast.iter_child_nodes(node):
            inner = scope
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = (*scope, child.name)
            if isinstance(child, ast.Attribute) and child.attr in names and isinstance(child.ctx, ast.Load):
                yield child.attr, f"{rel}:{'.'.join(scope) or '<module>'}", id(child) in arguments
            yield from visit(child, inner)

    yield from visit(tree, ())


def stray_control_reads(root: Path, controls: frozenset[str], readers: dict[str, set[str]]) -> list[str]:
    selectors = set().union(*readers.values()) | CONTROLS_PLUMBING
    found = []
    for path in sorted((root / "stack").rglob("*.py")):
        for control, where, passed in control_reads(path, root, controls):
            if control == "controls":
                if where not in selectors:
                    found.append(f"{where} reads the controls")
            elif where not in readers.get(control, set()):
                found.append(f"{where} reads {control}")
            elif passed and control not in PASSED_ON:
                found.append(f"{where} hands {control} on as a parameter")
    return found


def test_production_code_never_reads_a_control() -> None:
    from stack.config import Settings
    from stack.controls import CONTROLS, Controls

    assert set(CONTROL_READERS) == set(CONTROLS) == {f.name for f in fields(Controls)}
    assert CONTROLS.isdisjoint(f.name for f in fields(Settings))  # apart from the product's settings
    assert stray_control_reads(ROOT, CONTROLS, CONTROL_READERS) == []


def test_a_control_read_in_product_code_is_caught(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"stack/relay.py": "def relay_passes(settings):\n"
                                              "    return settings.controls.reconciler_enabled\n"})
    assert stray_control_reads(root, frozenset({"reconciler_enabled"}), CONTROL_READERS) == []  # the selector may
    _tree(tmp_path, {"stack/relay.py": "class Relay:\n    def run_once(self):\n"
                                       "        if self.settings.controls.reconciler_enabled:\n            pass\n"})
    assert stray_control_reads(root, frozenset({"reconciler_enabled"}), CONTROL_READERS) == [
        "stack/relay.py:Relay.run_once reads reconciler_enabled", "stack/relay.py:Relay.run_once reads the controls"]


def test_a_control_handed_on_as_a_parameter_is_caught(tmp_path: Path) -> None:
    # Planted: the selector passes the flag into the limiter, which would branch on it per request.
    root = _tree(tmp_path, {"stack/web/app.py": "def _request_limiter(settings, clients):\n"
                                                "    if not settings.controls.rate_limits:\n"
                                                "        return NoLimits()\n    return RequestLimiter(clients)\n"})
    assert stray_control_reads(root, frozenset({"rate_limits"}), CONTROL_READERS) == []
    _tree(tmp_path, {"stack/web/app.py": "def _request_limiter(settings, clients):\n"
                                         "    return RequestLimiter(clients, enabled=settings.controls.rate_limits)\n"})
    assert stray_control_reads(root, frozenset({"rate_limits"}), CONTROL_READERS) == [
        "stack/web/app.py:_request_limiter hands rate_limits on as a parameter"]
