"""The base install (harness + checkers) needs none of the stack's extras (issue #8, item 10).

A fresh interpreter runs ``proctor check`` on a stored run folder, then lists the
distributions its loaded modules come from; each must be one the base dependencies of
``pyproject.toml`` install (their requirement closure).  So a line that makes the
offline check import FastAPI, RQ or SQLAlchemy fails here, without a second venv.
"""

from __future__ import annotations

import functools
import importlib.metadata as metadata
import json
import re
import subprocess
import sys
import tomllib
import types
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import chaos.cli as cli
from chaos.cli.extras import EXTRA_OF_MODULE, missing_extra_hint
from test_analyze import build_run

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

_PROBE = """
import json, sys
{code}
print(json.dumps(sorted({{name.split(".")[0] for name in sys.modules}})))
"""


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _applies(req: Requirement, extras: list[str]) -> bool:
    return req.marker is None or any(req.marker.evaluate({"extra": e}) for e in ["", *extras])


def requirement_closure(requirements: list[str], *, their_extras: bool = False) -> set[str]:
    """Distribution names ``requirements`` install, following each one's own requirements.

    ``their_extras`` also counts the optional extras of the listed distributions (not of
    deeper ones): httpx imports ``brotli`` or ``rich`` when they happen to be installed
    (here the dev extra pulls them), which is httpx's business, not a hard requirement.
    """
    seen: set[str] = set()
    todo = [(Requirement(text), their_extras) for text in requirements]
    while todo:
        req, with_extras = todo.pop()
        name = _norm(req.name)
        if name in seen or name == "proctor":
            continue
        seen.add(name)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # an optional extra nobody installed: nothing of it can be loaded
        extras = (dist.metadata.get_all("Provides-Extra") or []) if with_extras else []
        todo += [(sub, False) for text in dist.requires or []
                 if _applies(sub := Requirement(text), extras)]
    return seen


@functools.cache
def loaded_distributions(code: str) -> set[str]:
    """Distributions whose modules a fresh interpreter holds after running ``code``."""
    out = subprocess.run([sys.executable, "-c", _PROBE.format(code=code)], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    modules = json.loads(out.strip().splitlines()[-1])
    owners = metadata.packages_distributions()
    return {_norm(dist) for module in modules for dist in owners.get(module, ())} - {"proctor"}


def foreign_distributions(code: str) -> set[str]:
    """What ``code`` loads beyond the interpreter's own start-up and the base closure."""
    extra = loaded_distributions(code) - loaded_distributions("pass")
    return extra - requirement_closure(PROJECT["dependencies"], their_extras=True)


def test_proctor_check_needs_only_the_base_install(tmp_path: Path) -> None:
    run = build_run(tmp_path / "run")
    code = f"from chaos.cli import main\nassert main(['check', {str(run)!r}]) == 0"
    assert foreign_distributions(code) == set()
    assert (run / "report.md").is_file()  # the check really ran


def test_harness_modules_need_only_the_base_install() -> None:
    code = "import chaos.checkers, chaos.analyze, chaos.faultproxy, chaos.nemesis.network"
    assert foreign_distributions(code) == set()


def test_probe_sees_a_stack_import() -> None:
    # Negative control: the same probe on stack code names what the base lacks.
    assert {"rq", "redis", "fastapi"} <= foreign_distributions("import stack.lanes.queues, stack.web.app")


EXTRAS = ("stack", "load", "postgres", "compose")


def _extra(name: str) -> list[str]:
    return PROJECT["optional-dependencies"][name]


def test_base_holds_no_extra_and_dev_pulls_them_all() -> None:
    base = requirement_closure(PROJECT["dependencies"])
    for extra in EXTRAS:
        direct = {_norm(Requirement(text).name) for text in _extra(extra)}
        assert not direct & base, extra
    dev = [Requirement(text) for text in _extra("dev")]
    assert any(r.name == "proctor" and r.extras == set(EXTRAS) for r in dev)


@pytest.mark.parametrize("extra", EXTRAS)
def test_extra_hints_match_pyproject(extra: str) -> None:
    # Every module EXTRA_OF_MODULE names for this extra comes from a distribution the
    # extra installs, and each distribution listed directly in it has a hint.
    closure = requirement_closure(_extra(extra))
    owners = metadata.packages_distributions()
    hinted = {module for module, name in EXTRA_OF_MODULE.items() if name == extra}
    assert hinted and all(_norm(owners[module][0]) in closure for module in hinted)
    for text in _extra(extra):
        dist = _norm(Requirement(text).name)
        assert any(_norm(owners[module][0]) == dist for module in hinted), dist


def _command_failing_with(monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    def main(argv: list[str]) -> int:
        raise ModuleNotFoundError(f"No module named {module!r}", name=module)

    monkeypatch.setitem(sys.modules, "fake_command", types.SimpleNamespace(main=main))
    monkeypatch.setitem(cli.SUBCOMMANDS, "fake", ("fake_command", "main", "a test command"))


def test_missing_extra_names_the_extra(monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    _command_failing_with(monkeypatch, "rq.worker")
    assert cli.main(["fake"]) == 2
    assert capsys.readouterr().err.strip() == (
        "proctor fake: needs the 'stack' extra (module 'rq' is missing): pip install 'proctor[stack]'")


def test_other_missing_modules_are_not_blamed_on_an_extra(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    _command_failing_with(monkeypatch, "no_such_module")
    monkeypatch.delenv("PROCTOR_DEBUG", raising=False)
    assert cli.main(["fake"]) == 2  # one line (the dispatcher's last net), never an extra's hint
    err = capsys.readouterr().err
    assert "no_such_module" in err and "pip install" not in err
    monkeypatch.setenv("PROCTOR_DEBUG", "1")
    with pytest.raises(ModuleNotFoundError, match="no_such_module"):
        cli.main(["fake"])
    assert missing_extra_hint(ModuleNotFoundError("x", name="numpy"), "check") is None
