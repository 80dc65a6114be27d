"""docs/architecture.md's settings table is checked against the declarations (issue #20, item 3):
one row per declared setting and control (``Settings``, ``Controls``), with its variable, its default
and its help line, and the controls marked as such."""

from __future__ import annotations

import re
from pathlib import Path

from stack.config import ENV_NAMES, Settings
from stack.controls import CONTROLS, Controls
from stack.settings_schema import declared

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
_ROW = re.compile(r"^\| `([A-Z_]+)` \| `(\w+)` \| ([^|]+) \| (.*) \|$", re.M)


def table_rows(text: str) -> dict[str, tuple[str, str, str]]:
    """field -> (variable, default, what), from the "Settings (environment)" section."""
    section = text[text.index("## Settings (environment)"):]
    section = section[: section.index("\n## ", 1)]
    return {name: (var, default.strip(), what) for var, name, default, what in _ROW.findall(section)}


def expected_default(name: str, env: dict[str, str]) -> str:
    if name == "run_dir":
        return "`<results>/runs/adhoc`"  # resolved against the working directory when read
    value = env[ENV_NAMES[name]]
    return f"`{value}`" if value else "(empty)"


def table_problems(rows: dict[str, tuple[str, str, str]]) -> list[str]:
    env = Settings().to_env()
    names = list(ENV_NAMES)  # every declared setting and control
    problems = [f"{name}: no row" for name in names if name not in rows]
    problems += [f"{name}: a row but no Settings field" for name in rows if name not in names]
    for name in (n for n in names if n in rows):
        var, default, what = rows[name]
        if var != ENV_NAMES[name]:
            problems.append(f"{name}: variable {var}, Settings reads {ENV_NAMES[name]}")
        if default != expected_default(name, env):
            problems.append(f"{name}: default {default}, Settings has {expected_default(name, env)}")
        if name in CONTROLS and "**negative control**" not in what and "**test only**" not in what:
            problems.append(f"{name}: a control, not marked as one")
    return problems


def test_the_settings_table_matches_settings():
    assert table_problems(table_rows(DOC.read_text())) == []


def test_a_drifted_table_is_reported():
    # Negative control: a missing row, a wrong variable, a wrong default and an unmarked control.
    rows = table_rows(DOC.read_text())
    rows.pop("relay_interval")
    rows["liveness_ttl"] = ("PROCTOR_LIVENESS", *rows["liveness_ttl"][1:])
    rows["max_in_flight"] = (rows["max_in_flight"][0], "`65`", rows["max_in_flight"][2])
    rows["shared_lane"] = (*rows["shared_lane"][:2], "on = AI jobs join the merit queue")
    assert table_problems(rows) == [
        "relay_interval: no row",
        "liveness_ttl: variable PROCTOR_LIVENESS, Settings reads PROCTOR_LIVENESS_TTL",
        "max_in_flight: default `65`, Settings has `64`",
        "shared_lane: a control, not marked as one",
    ]


def help_problems(rows: dict[str, tuple[str, str, str]]) -> list[str]:
    """Rows whose "what" is not the help line declared with the setting (stack.settings_schema.setting)."""
    helps = {item.name: item.help for cls in (Settings, Controls) for item in declared(cls)}
    return [f"{name}: the table says {what!r}, the declaration {helps[name]!r}"
            for name, (_var, _default, what) in rows.items() if name in helps and what != helps[name]]


def test_the_settings_table_shows_the_declared_help():
    # Measured: 0.02 s (the table parsed once more).
    assert help_problems(table_rows(DOC.read_text())) == []


def test_a_drifted_help_line_is_reported():
    rows = table_rows(DOC.read_text())
    rows["relay_interval"] = (*rows["relay_interval"][:2], "between passes")
    assert help_problems(rows) == [
        "relay_interval: the table says 'between passes', the declaration 'between relay passes (real seconds)'"]
