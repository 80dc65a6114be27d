"""Module paths written as strings break only at run time, so a test resolves them all (issue #20, item 9).

The strings live in five places: the command table (``chaos.cli.SUBCOMMANDS``), the job table
(``stack.lanes.queues.JOB_FUNCTION``), the spawn specs (``stack.embedded.spec``), the compose
file's commands and the ramp benchmark. Each is read here the way it is used (an import of the
module, then the attribute), and ``proctor <cmd> --help`` exits 0 for every command.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from chaos.cli import SUBCOMMANDS, main
from stack.embedded.spec import COMPONENT_MODULES, DEFAULT_COMMANDS
from stack.lanes.queues import JOB_FUNCTION

ROOT = Path(__file__).resolve().parents[2]

# A Proctor module or object: "stack.relay", "stack.lanes.jobs.send_result_sms", "stack.providers.ai:create_app".
_DOTTED = re.compile(r"^(?:chaos|stack)(?:\.\w+)+(?::\w+)?$")
# `-m module` in an argv written as a list: ["python", "-m", "stack.relay"] or ("{python}", "-m", ...).
_MINUS_M = re.compile(r"""["']-m["']\s*,\s*["']([\w.]+)["']""")
_QUOTED = re.compile(r"""["']((?:chaos|stack)(?:\.\w+)+(?::\w+)?)["']""")


def resolve(dotted: str) -> object:
    """The module or object a dotted string names, as a worker, uvicorn or ``-m`` would find it."""
    if ":" in dotted:
        module, attr = dotted.split(":", 1)
        return getattr(importlib.import_module(module), attr)
    try:
        return importlib.import_module(dotted)
    except ModuleNotFoundError as exc:
        if exc.name != dotted or "." not in dotted:
            raise
    module, attr = dotted.rsplit(".", 1)
    return getattr(importlib.import_module(module), attr)


def _strings_in_python(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    return {node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and _DOTTED.match(node.value)}


def _strings_in_text(path: Path) -> set[str]:
    text = path.read_text()
    return set(_MINUS_M.findall(text)) | set(_QUOTED.findall(text))


def _spawn_spec_strings() -> set[str]:
    argv_parts = {part for argv in DEFAULT_COMMANDS.values() for part in argv}
    return {part for part in argv_parts if _DOTTED.match(part)} | set(COMPONENT_MODULES.values())


def test_every_command_in_the_table_resolves():
    for name, (module, func, _) in SUBCOMMANDS.items():
        assert callable(getattr(importlib.import_module(module), func)), name


def test_every_job_function_resolves():
    assert JOB_FUNCTION
    for kind, dotted in JOB_FUNCTION.items():
        assert callable(resolve(dotted)), kind


@pytest.mark.parametrize("source", ["spawn specs", "docker-compose.yml", "loadtests/bench_ramp.py"])
def test_every_dotted_path_in_a_file_resolves(source):
    strings = {
        "spawn specs": _spawn_spec_strings,
        "docker-compose.yml": lambda: _strings_in_text(ROOT / "docker-compose.yml"),
        "loadtests/bench_ramp.py": lambda: _strings_in_python(ROOT / "loadtests/bench_ramp.py")
        | _strings_in_text(ROOT / "loadtests/bench_ramp.py"),
    }[source]()
    assert strings, f"no dotted path found in {source}: the extraction is broken"
    unresolved = []
    for dotted in sorted(strings):
        try:
            resolve(dotted)
        except (ImportError, AttributeError) as exc:
            unresolved.append(f"{dotted}: {exc}")
    assert not unresolved, unresolved


def test_a_moved_module_is_reported():
    # Negative control: the old paths of moved modules no longer resolve, and say so.
    for stale in ("chaos.ramp_gate", "stack.ailane.job.write_narrative", "stack.web.routes_admin:router"):
        with pytest.raises((ImportError, AttributeError)):
            resolve(stale)


def test_the_extraction_finds_argv_and_quoted_paths(tmp_path):
    compose = tmp_path / "compose.yml"
    compose.write_text('command: ["python", "-m", "stack.nowhere", "x"]\napp: "stack.providers.ai:nope"\n')
    assert _strings_in_text(compose) == {"stack.nowhere", "stack.providers.ai:nope"}


@pytest.mark.parametrize("command", sorted(SUBCOMMANDS))
def test_every_command_answers_help(command, capsys):
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])
    assert exited.value.code in (0, None), capsys.readouterr()
    assert capsys.readouterr().out.strip()
