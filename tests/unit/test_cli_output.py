"""stack/cli_output.py: the admin commands' table, ISO 8601 times, and empty results said in words."""

from __future__ import annotations

import json

from stack import cli_output as output


def test_lock_shows_iso_times_and_says_when_nothing_is_stored(capsys) -> None:
    empty = output.render_lock({"windows": [], "capacity_lock": {"held": False}})
    assert empty.startswith("no exam windows stored") and "capacity lock: free" in empty
    shown = output.render_lock({"windows": [{"exam_code": "NOVA-101", "open": True, "opens_at": 1800000000,
                                             "closes_at": 1800003600.5, "min_web": 2, "min_workers": {"merit": 2}}],
                                "capacity_lock": {"held": True, "description": "scale web=3"}})
    header, row, capacity = shown.splitlines()
    assert header.split()[:4] == ["exam", "state", "opens", "closes"]
    assert "2027-01-15T08:00:00Z" in row and "2027-01-15T09:00:00Z" in row and "OPEN" in row
    assert capacity == "capacity lock: held by scale web=3"
    output.emit({"windows": []}, True, output.render_lock)
    assert json.loads(capsys.readouterr().out) == {"windows": []}  # --json: the API's answer untouched


def test_table_aligns_columns_and_renders_nested_values() -> None:
    text = output.table([{"a": "x", "b": {"k": 1}}, {"a": "longer", "b": None}], [("a", "A"), ("b", "B")], "none")
    lines = text.splitlines()
    assert lines[0].index("B") == lines[1].index('{"k": 1}') == lines[2].index("-")
    assert output.table([], [("a", "A")], "nothing here") == "nothing here"


def test_iso_is_utc_with_z() -> None:
    assert output.iso(0) == "1970-01-01T00:00:00Z" and output.iso(None) == "-"
