"""The one admin client (issue #20, item 4): an explicit URL with the token from the environment,
else a run folder's manifest, by default the latest run under PROCTOR_RESULTS_DIR."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stack.admin_client import AdminTarget, AdminTargetError, resolve_target
from stack.paths import update_latest_link


def _run(runs: Path, name: str, admin: str, token: str) -> Path:
    run_dir = runs / name
    run_dir.mkdir(parents=True)
    (run_dir / "manifest.json").write_text(json.dumps({"urls": {"admin": admin + "/"},
                                                       "settings": {"PROCTOR_ADMIN_TOKEN": token}}))
    return run_dir


def test_an_explicit_url_takes_its_token_from_the_environment():
    env = {"PROCTOR_ADMIN_TOKEN": "t0k"}
    assert resolve_target(None, "http://127.0.0.1:9001/", env) == AdminTarget("http://127.0.0.1:9001", "t0k")
    assert resolve_target(None, None, {**env, "PROCTOR_ADMIN_URL": "http://127.0.0.1:9002"}).url == "http://127.0.0.1:9002"
    with pytest.raises(AdminTargetError, match="PROCTOR_ADMIN_TOKEN"):
        resolve_target(None, "http://127.0.0.1:9001", {})


def test_without_a_url_the_latest_run_under_the_results_dir_is_the_target(tmp_path):
    runs = tmp_path / "res" / "runs"
    _run(runs, "older", "http://127.0.0.1:9100", "old")
    newest = _run(runs, "newer", "http://127.0.0.1:9200", "new")
    env = {"PROCTOR_RESULTS_DIR": str(tmp_path / "res")}
    assert update_latest_link(newest, runs) is not None
    assert resolve_target(None, None, env) == AdminTarget("http://127.0.0.1:9200", "new")
    assert resolve_target(runs / "older", None, env).token == "old"  # an explicit run folder wins


def test_a_missing_or_incomplete_manifest_is_one_clear_error(tmp_path):
    with pytest.raises(AdminTargetError, match="no manifest"):
        resolve_target(tmp_path, None, {})
    (tmp_path / "manifest.json").write_text("{}")
    with pytest.raises(AdminTargetError, match="names no admin URL"):
        resolve_target(tmp_path, None, {})
