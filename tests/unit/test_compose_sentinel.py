"""docker-compose.sentinel.yml read as data, against stack/deploy/valkey_conf.py: the fixed
addresses the nodes and Sentinels announce, what every client is pointed at, and the
configuration each container writes from its environment. Each rule has a broken twin."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from stack.deploy.valkey_conf import (ADDRESS_SUFFIX, NODE_SERVICES, PASSWORD_ENV, SENTINEL_SERVICES, node_text,
                                      sentinel_addresses, sentinel_config)

REPO = Path(__file__).resolve().parents[2]
OVERLAY = REPO / "docker-compose.sentinel.yml"
NET = "${PROCTOR_COMPOSE_NET:-172.29.13}"
CLIENTS = ("web-1", "web-2", "relay", "worker-merit-1", "worker-merit-2", "worker-ai-1", "worker-sms-1")


def load() -> dict[str, Any]:
    return yaml.safe_load(OVERLAY.read_text())


def address_problems(doc: dict[str, Any]) -> list[str]:
    """A node or Sentinel whose fixed address is not the one valkey_conf announces for it."""
    problems = []
    for service, suffix in ADDRESS_SUFFIX.items():
        got = (doc["services"].get(service, {}).get("networks") or {}).get("stack", {}).get("ipv4_address")
        if got != f"{NET}.{suffix}":
            problems.append(f"{service}: {got}")
    return problems


def client_problems(doc: dict[str, Any]) -> list[str]:
    """A client not pointed at the three Sentinels, or not waiting for them."""
    want = sentinel_addresses(NET)
    problems = []
    for service in CLIENTS:
        entry = doc["services"].get(service, {})
        if (entry.get("environment") or {}).get("PROCTOR_VALKEY_SENTINELS") != want:
            problems.append(f"{service}: PROCTOR_VALKEY_SENTINELS")
        if set(entry.get("depends_on") or {}) != set(SENTINEL_SERVICES):
            problems.append(f"{service}: depends_on")
    return problems


def test_every_node_and_sentinel_has_the_address_it_announces() -> None:
    assert address_problems(load()) == []


def test_negative_control_a_moved_sentinel_is_caught() -> None:
    doc = load()
    doc["services"]["sentinel-2"]["networks"]["stack"]["ipv4_address"] = f"{NET}.99"
    assert address_problems(doc) == [f"sentinel-2: {NET}.99"]


def test_every_client_asks_the_sentinels_and_waits_for_them() -> None:
    assert client_problems(load()) == []


def test_negative_control_a_client_left_on_the_single_node_is_caught() -> None:
    doc = load()
    del doc["services"]["relay"]
    assert client_problems(doc) == ["relay: PROCTOR_VALKEY_SENTINELS", "relay: depends_on"]


def test_the_certificate_names_every_fixed_address() -> None:
    script = (REPO / "docker" / "bin" / "proctor-certs").read_text()
    for suffix in ADDRESS_SUFFIX.values():
        assert f"IP:$net.{suffix}" in script, suffix


def _env(**extra: str) -> dict[str, str]:
    return {"PROCTOR_COMPOSE_NET": "10.9.8", **{name: f"pw-{user}" for user, name in PASSWORD_ENV.items()}, **extra}


def test_the_replica_follows_the_first_node_and_each_announces_its_own_address() -> None:
    primary = node_text(_env(PROCTOR_VALKEY_NODE=NODE_SERVICES[0]))
    replica = node_text(_env(PROCTOR_VALKEY_NODE=NODE_SERVICES[1]))
    assert "replica-announce-ip 10.9.8.11" in primary and "replicaof" not in primary
    assert "replica-announce-ip 10.9.8.12" in replica and "replicaof 10.9.8.11 6380" in replica
    assert 'masterauth "pw-replica"' in replica


def test_a_sentinel_monitors_the_first_node_and_keeps_its_passwords_private(tmp_path: Path) -> None:
    path = sentinel_config(tmp_path / "s" / "sentinel.conf", _env(PROCTOR_SENTINEL_NAME="sentinel-3"))
    text = path.read_text()
    assert "sentinel announce-ip 10.9.8.23" in text and "sentinel monitor proctor 10.9.8.11 6380 2" in text
    assert "bind 0.0.0.0" in text and "pw-discovery" not in text  # clients' password: its digest only
    assert path.stat().st_mode & 0o077 == 0


def test_a_missing_password_or_name_is_one_clear_line() -> None:
    env = _env(PROCTOR_VALKEY_NODE="valkey-2")
    del env[PASSWORD_ENV["replica"]]
    with pytest.raises(SystemExit, match="PROCTOR_VALKEY_REPLICA_PASSWORD not set"):
        node_text(env)
    with pytest.raises(SystemExit, match="PROCTOR_VALKEY_NODE must be one of"):
        node_text(_env(PROCTOR_VALKEY_NODE="valkey-9"))
