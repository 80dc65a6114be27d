"""The README's layout table and docs/architecture.md's where-is table match the tree (issue #20).

README: every top-level folder has a row, and every module and package directly under
``stack/`` and ``chaos/`` is named in its folder's row (and every name there exists).
Architecture: every registered scenario, checker and command is listed with its file, and
every file the where-is table names exists.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_ROW = re.compile(r"^\| `([\w.-]+)/` \| (.*) \|$", re.M)
_NAMED = re.compile(r"`([\w.*-]+(?:/[\w.*-]+)*/?)`")
_WHERE_ROW = re.compile(r"^\| (\w+) \| `([\w.-]+)` \| `([\w./-]+\.py)` \|", re.M)


def layout_rows(readme: str) -> dict[str, str]:
    section = readme[readme.index("## Layout"):]
    section = section[: section.index("\n## ", 1)] if "\n## " in section[1:] else section
    return dict(_ROW.findall(section))


def top_level_folders(root: Path) -> set[str]:
    listed = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True).stdout.split()
    return {name.split("/")[0] for name in listed if "/" in name and not name.startswith(".")}


def children(folder: Path) -> set[str]:
    """Packages (``name/``) and modules (``name.py``) directly in ``folder``, tests and __init__ aside."""
    found = {f"{path.name}/" for path in folder.iterdir() if (path / "__init__.py").is_file()}
    found |= {path.name for path in folder.glob("*.py") if path.name != "__init__.py" and not path.name.startswith("test_")}
    return found


def named_children(row: str) -> set[str]:
    """Names in a row, first path part only (``web/routes/`` names ``web/``)."""
    names = set()
    for name in _NAMED.findall(row):
        first = name.split("/")[0]
        names.add(f"{first}/" if "/" in name else first)
    return names


def row_problems(folder: str, row: str, root: Path) -> list[str]:
    actual = children(root / folder)
    named = {name for name in named_children(row) if name.endswith("/") or name.endswith(".py")}
    missing = sorted(actual - named)
    stale = sorted(name for name in named - actual if "*" not in name and not (root / folder / name).exists())
    return [f"{folder}/{name} not in the README's layout table" for name in missing] + \
           [f"{folder}/{name} in the README's layout table but not in the tree" for name in stale]


def test_every_top_level_folder_has_a_row():
    rows = layout_rows((ROOT / "README.md").read_text())
    assert top_level_folders(ROOT) - set(rows) == set()
    assert [folder for folder in rows if not (ROOT / folder).is_dir()] == []


@pytest.mark.parametrize("folder", ["stack", "chaos"])
def test_the_row_names_every_module_and_package(folder):
    rows = layout_rows((ROOT / "README.md").read_text())
    assert row_problems(folder, rows[folder], ROOT) == []


def test_a_module_missing_from_the_row_is_reported(tmp_path):
    # Negative control: a new module and a stale name are both seen.
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "sub" / "__init__.py").touch()
    (tmp_path / "pkg" / "new.py").touch()
    (tmp_path / "pkg" / "test_x.py").touch()
    assert row_problems("pkg", "`sub/` (things), `gone.py`", tmp_path) == [
        "pkg/new.py not in the README's layout table", "pkg/gone.py in the README's layout table but not in the tree"]


# --- docs/architecture.md: where is it --------------------------------------------------------
def where_is(text: str) -> dict[tuple[str, str], str]:
    """(kind, name) -> file, from the where-is table's rows ``| kind | `name` | `file` |``."""
    section = text[text.index("## Where is it"):]
    return {(kind, name): path for kind, name, path in _WHERE_ROW.findall(section)}


def _registered() -> dict[str, set[str]]:
    from chaos.checkers import CHECKERS
    from chaos.cli import SUBCOMMANDS
    from chaos.scenarios import SCENARIOS

    return {"scenario": set(SCENARIOS), "checker": set(CHECKERS), "command": set(SUBCOMMANDS)}


def test_every_registered_scenario_checker_and_command_is_listed():
    listed = where_is((ROOT / "docs" / "architecture.md").read_text())
    for kind, names in _registered().items():
        assert names - {name for k, name in listed if k == kind} == set(), kind


def test_every_listed_file_exists_and_names_what_it_holds():
    listed = where_is((ROOT / "docs" / "architecture.md").read_text())
    assert listed, "the where-is table was not found"
    assert [path for path in listed.values() if not (ROOT / path).is_file()] == []
    # each registered thing is listed at the file that defines it (a moved one is caught)
    for (kind, name), path in listed.items():
        if kind in _DEFINED_IN:
            assert _DEFINED_IN[kind](name, path), (kind, name, path)


def _scenario_in(name: str, path: str) -> bool:
    return f'"{name}"' in (ROOT / path).read_text()


def _checker_in(name: str, path: str) -> bool:
    import inspect

    from chaos.checkers import CHECKERS

    return Path(inspect.getsourcefile(CHECKERS[name])).resolve() == (ROOT / path).resolve()


def _command_in(name: str, path: str) -> bool:
    from chaos.cli import SUBCOMMANDS

    module = SUBCOMMANDS[name][0]
    return path in (module.replace(".", "/") + ".py", module.replace(".", "/") + "/__init__.py")


_DEFINED_IN = {"scenario": _scenario_in, "checker": _checker_in, "command": _command_in}


def test_the_where_is_parser_sees_rows(tmp_path):
    # Negative control: a row whose file is gone is parsed, so the existence check can fail.
    text = "## Where is it\n\n| kind | name | file |\n|---|---|---|\n| scenario | `x` | `chaos/nowhere.py` |\n"
    assert where_is(text) == {("scenario", "x"): "chaos/nowhere.py"}
    assert not (ROOT / "chaos/nowhere.py").exists()
