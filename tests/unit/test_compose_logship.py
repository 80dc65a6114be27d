"""Log shipping on compose without an engine (chaos/deployment/compose_logship.py, docs/log-shipping.md
"Compose"): the shipper's configuration is the embedded rendering pointed at the store's service,
every Python service logs into the run's folder at the same path the shipper follows, the store's
read API is published on loopback only, and no secret lands in the override."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from chaos.deployment.compose import ComposeSpec
from chaos.deployment.compose_files import PYTHON_SERVICES, component_for_service, override_document
from chaos.deployment.compose_logship import (LOG_STORE_RELP_PORT, LOG_STORE_SERVICE, SHIPPER_SERVICE,
                                              add_log_shipping, prepare_logs, write_shipper_config)
from stack.config import load_settings
from stack.logship import rsyslog

SERVICES = [s for s in PYTHON_SERVICES if s != "worker-sms-2"]


def _override(tmp_path: Path, policy: str = "redact") -> tuple[dict, rsyslog.ShipperPaths]:
    paths = write_shipper_config(tmp_path, policy)
    doc = override_document({}, {"ai-provider": 18101, "sms-gateway": 18102}, tmp_path, tmp_path / "connections")
    add_log_shipping(doc["services"], SERVICES, paths, 18103)
    return doc, paths


def test_the_shipper_config_is_the_embedded_rendering_pointed_at_the_store_service(tmp_path: Path) -> None:
    _doc, paths = _override(tmp_path)
    embedded = rsyslog.render_config(paths, LOG_STORE_RELP_PORT, *rsyslog.LOG_POLICIES["redact"])
    compose = paths.config.read_text()
    assert compose == embedded.replace('target="127.0.0.1"', f'target="{LOG_STORE_SERVICE}"')
    assert f'file="{(tmp_path / "logs").resolve()}/*.log"' in compose  # the host's path: mounted at the same place


@pytest.mark.parametrize("policy, present, absent", [("unredacted", "load=\"impstats\"", "re_match"),
                                                     ("uncounted", "re_match", "load=\"impstats\"")])
def test_negative_control_policies_render_as_on_the_embedded_stack(tmp_path: Path, policy: str, present: str,
                                                                   absent: str) -> None:
    _doc, paths = _override(tmp_path, policy)
    text = paths.config.read_text()
    assert present in text and absent not in text


def test_every_service_logs_into_the_run_folder_that_the_shipper_follows(tmp_path: Path) -> None:
    doc, paths = _override(tmp_path)
    logs = str(paths.logs)
    for service in SERVICES:
        entry = doc["services"][service]
        assert entry["entrypoint"] == ["proctor-log-to", f"{logs}/{service.replace('-', '_')}.log"], service
        assert f"{logs}:{logs}" in entry["volumes"], service
    shipper = doc["services"][SHIPPER_SERVICE]
    assert f"{logs}:{logs}:ro" in shipper["volumes"]
    assert shipper["command"] == rsyslog.rsyslogd_argv(paths)
    assert shipper["depends_on"] == {LOG_STORE_SERVICE: {"condition": "service_healthy"}}


def test_the_store_publishes_its_read_api_on_loopback_only_and_the_override_holds_no_secret(tmp_path: Path) -> None:
    doc, _paths = _override(tmp_path)
    store = doc["services"][LOG_STORE_SERVICE]
    assert store["ports"] == ["127.0.0.1:18103:8103"]
    assert "--host" in store["command"] and "0.0.0.0" in store["command"]  # the shipper is another container
    assert store["env_file"] == ["${PROCTOR_COMPOSE_RUN:-.compose/run}/proctor.env"]  # the token comes from there
    text = json.dumps(doc)
    assert "TOKEN" not in text and "SECRET" not in text


def test_the_components_log_files_are_theirs_and_0600(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    owners: list[tuple[str, int]] = []
    monkeypatch.setattr(os, "chown", lambda path, uid, gid: owners.append((Path(path).name, uid)))
    logs = prepare_logs(tmp_path, ["web-1", "worker-sms-1"], 10001)
    assert sorted(p.name for p in logs.iterdir()) == ["web_1.log", "worker_sms_1.log"]
    assert {uid for _name, uid in owners} == {10001} and ("logs", 10001) in owners
    assert stat.S_IMODE(logs.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in logs.iterdir())


def test_the_store_and_the_shipper_are_components_and_a_bad_policy_is_named() -> None:
    assert component_for_service("log-store").role == "log_store"
    assert component_for_service("shipper").role == "shipper"
    reason = ComposeSpec("x", Path("r"), log_shipping="loud").unsupported()
    assert reason == "log_shipping='loud': one of ['redact', 'uncounted', 'unredacted']"


def test_the_final_read_counts_the_files_by_the_absolute_names_the_shipper_sends(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`proctor sweep` passes a relative run folder: the produced lines must carry the same absolute
    file names as the store's ledger (both compose log-store runs of the first compose sweep were
    reported invalid, 178 lines "lost", because they did not)."""
    import chaos.deployment.compose as compose

    monkeypatch.chdir(tmp_path)
    deployment = compose.ComposeDeployment(ComposeSpec("x", Path("runs/r"), log_shipping="redact"))
    seen: list[Path] = []
    monkeypatch.setattr(compose, "final_read", lambda *args, **kwargs: None)
    monkeypatch.setattr(compose, "export_logs", lambda run_dir, *args: seen.append(run_dir))
    settings = load_settings({}).with_overrides(admin_token="t", log_store_token="l")
    monkeypatch.setattr(compose.ComposeDeployment, "settings", property(lambda self: settings))
    deployment.export(tmp_path / "out")
    assert seen == [(tmp_path / "runs" / "r").resolve()]
    assert seen[0] == write_shipper_config(Path("runs/r"), "redact").logs.parent  # what the shipper's config names

