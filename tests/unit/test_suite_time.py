"""suite_time.py (root): per-file wall and CPU seconds, merged over pytest-xdist workers."""

from __future__ import annotations

from pathlib import Path

import suite_time


def test_parts_of_two_workers_add_up_per_file(tmp_path: Path) -> None:
    (tmp_path / "gw0.tsv").write_text("chaos/test_a.py\t10.00\t2.50\ntests/unit/test_b.py\t1.00\t1.00\n")
    (tmp_path / "gw1.tsv").write_text("chaos/test_a.py\t5.00\t0.50\n")
    assert suite_time._merge(tmp_path) == {"chaos/test_a.py": (15.0, 3.0), "tests/unit/test_b.py": (1.0, 1.0)}


def test_cpu_seconds_grow_with_work() -> None:
    before = suite_time._cpu_seconds()
    sum(i * i for i in range(2_000_000))
    assert suite_time._cpu_seconds() > before


def test_the_compose_pass_keeps_its_rows_apart_from_the_main_pass(tmp_path: Path) -> None:
    assert suite_time.parts_folder(tmp_path, None) == tmp_path / "suite-time"
    assert suite_time.parts_folder(tmp_path, "embedded") == tmp_path / "suite-time"
    assert suite_time.parts_folder(tmp_path, "compose") == tmp_path / "suite-time-compose"
