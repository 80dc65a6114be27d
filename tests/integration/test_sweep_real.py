"""One real sweep: the shortest scenario for one seed (~15-25 s on 2 cores). The hog's
lifecycle is tested without a stack in tests/unit/test_stress.py."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from chaos.cli import main as cli_main

pytestmark = pytest.mark.integration


def test_a_real_one_seed_sweep_writes_its_table_and_run_folder(tmp_path: Path) -> None:
    code = cli_main(["sweep", "--seeds", "1", "--scenario", "sms_kill_after_accept", "--out", str(tmp_path)])
    table = json.loads((tmp_path / "latest" / "table.json").read_text())
    assert code == 0, table
    assert table["complete"] is True and [r["verdict"] for r in table["runs"]] == ["valid"]
    assert (Path(table["runs"][0]["run_dir"]) / "report.md").is_file()
    assert ET.parse(tmp_path / "latest" / "junit.xml").getroot().get("tests") == "1"
