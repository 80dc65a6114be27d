"""Folders and markers agree, so ``make test-fast`` needs no server binary (issue #8, item 8).

One ``pytest --collect-only`` of the whole suite in a subprocess, with a probe plugin that
records each test's markers and whether any fixture it uses starts a server.  That is
read from the fixtures' own source (it names a server binary or starts a stack), not from
the list the root conftest keeps, so a new server fixture outside tests/integration/ that
the conftest does not know fails here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

_PROBE = '''
import inspect, json, os
from pathlib import Path

NEEDLES = ("valkey-server", "haproxy", "initdb", "EmbeddedStack", "PostgresServer")


def _starts_server(fixturedef):
    try:
        source = inspect.getsource(fixturedef.func)
    except (OSError, TypeError):
        return False
    return any(needle in source for needle in NEEDLES)


def pytest_collection_finish(session):
    rows = []
    for item in session.items:
        info = getattr(item, "_fixtureinfo", None)
        defs = [d for ds in (info.name2fixturedefs.values() if info else ()) for d in ds]
        rows.append({"id": item.nodeid, "markers": sorted({m.name for m in item.iter_markers()}),
                     "server": [d.argname for d in defs if _starts_server(d)]})
    Path(os.environ["MARKER_PROBE_OUT"]).write_text(json.dumps(rows))
'''


@pytest.fixture(scope="module")
def collected(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    probe_dir = tmp_path_factory.mktemp("probe")
    (probe_dir / "marker_probe.py").write_text(_PROBE)
    out = probe_dir / "items.json"
    env = {**os.environ, "MARKER_PROBE_OUT": str(out),
           "PYTHONPATH": os.pathsep.join([str(probe_dir), os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "marker_probe",
                    "-p", "no:cacheprovider"], cwd=ROOT, env=env, capture_output=True, check=True)
    return json.loads(out.read_text())


def _fast(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What ``-m "not integration and not slow"`` (make test-fast) selects."""
    return [r for r in rows if not {"integration", "slow"} & set(r["markers"])]


def test_folders_imply_the_integration_marker(collected: list[dict[str, Any]]) -> None:
    in_folders = [r for r in collected if r["id"].startswith(("tests/integration/", "chaos/"))]
    assert in_folders  # not vacuous
    assert [r["id"] for r in in_folders if "integration" not in r["markers"]] == []


def test_fast_selection_uses_no_server_fixture(collected: list[dict[str, Any]]) -> None:
    users = [r for r in collected if r["server"]]
    assert any(not r["id"].startswith("tests/integration/") for r in users)  # e.g. valkey_server
    assert [(r["id"], r["server"]) for r in _fast(collected) if r["server"]] == []


def test_moved_files_sit_where_their_marker_says(collected: list[dict[str, Any]]) -> None:
    fast = {r["id"].split("::")[0] for r in _fast(collected)}
    assert "tests/unit/test_embedded_units.py" in fast  # starts nothing: a unit test
    assert "tests/unit/web/test_web_dispatch.py" in fast  # its tests without Valkey stay fast
    every = {r["id"].split("::")[0] for r in collected}
    assert "tests/integration/test_relay.py" in every - fast  # starts Valkey and workers
