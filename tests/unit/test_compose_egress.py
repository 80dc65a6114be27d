"""SMS egress on compose without an engine (chaos/deployment/compose_egress.py, docs/egress.md
"Compose"): the override gives the gateway exactly the reserved address, worker 1 starts holding
it and the standby its own; the failover re-attaches it in the engine before the record says so;
the negative control's policy moves nothing; the runner checks the deployment's own address."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from chaos.deployment.compose import EGRESS_SHAPE, ComposeDeployment, ComposeSpec
from chaos.deployment.compose_egress import (CONTAINER_UID, EGRESS_NETWORK, EgressAddresses, EngineAddressMove,
                                             add_egress)
from chaos.deployment.compose_files import override_document
from chaos.deployment.targets import unsupported_on
from chaos.runner import _deployment_options
from chaos.scenarios import SCENARIOS
from stack.deploy.egress import (ATTACHMENT_NAME, FailoverController, KeepAddressOnLostHost, MoveReservedAddress,
                                 read_attachment)

ADDRESSES = EgressAddresses("172.29.214")


def _override(tmp_path: Path) -> dict[str, Any]:
    doc = override_document({}, {"ai-provider": 18101, "sms-gateway": 18102}, tmp_path, tmp_path / "connections")
    add_egress(doc["services"], doc.setdefault("networks", {}), ADDRESSES, tmp_path)
    return doc


def test_the_gateway_allows_exactly_the_reserved_address_on_a_network_of_its_own(tmp_path: Path) -> None:
    doc = _override(tmp_path)
    gateway = doc["services"]["sms-gateway"]
    assert gateway["environment"]["PROCTOR_SMS_ALLOWLIST"] == "172.29.214.10/32"
    assert gateway["networks"][EGRESS_NETWORK] == {"ipv4_address": "172.29.214.5"}
    assert doc["networks"][EGRESS_NETWORK]["ipam"]["config"][0]["ip_range"] == "172.29.214.128/25"  # fixed ones stay free
    assert gateway["ports"] == ["127.0.0.1:18102:9101"]  # the admin forward is kept


def test_worker_1_starts_with_the_reserved_address_and_the_standby_with_its_own(tmp_path: Path) -> None:
    services = _override(tmp_path)["services"]
    first, standby = services["worker-sms-1"], services["worker-sms-2"]
    assert first["networks"][EGRESS_NETWORK] == {"ipv4_address": "172.29.214.10"}
    assert standby["networks"][EGRESS_NETWORK] == {"ipv4_address": "172.29.214.12"}
    for service, host in ((first, "172.29.214.11"), (standby, "172.29.214.12")):
        env = service["environment"]
        assert env["PROCTOR_EGRESS_HOST"] == host
        assert env["PROCTOR_SMS_URL"] == "http://172.29.214.5:8102"  # the gateway's egress address: it sees ours
        assert env["PROCTOR_EGRESS_ATTACHMENT"] == "/srv/egress/sms.json"
        assert f"{(tmp_path / 'egress').resolve()}:/srv/egress:ro" in service["volumes"]
        assert "stack" in service["networks"]  # Valkey and the ledger stay on the project network


class FakeApi:
    """The engine's two network calls; each notes who the record named while it ran."""

    def __init__(self, record: Path) -> None:
        self.record = record
        self.calls: list[tuple[str, str, str | None]] = []
        self.holder_during_calls: set[str | None] = set()

    def _note(self, call: tuple[str, str, str | None]) -> None:
        self.calls.append(call)
        self.holder_during_calls.add(read_attachment(self.record).address_holder)

    def disconnect_container_from_network(self, container: str, net: str, force: bool = False) -> None:
        self._note(("disconnect", container, None))

    def connect_container_to_network(self, container: str, net: str, ipv4_address: str | None = None) -> None:
        self._note(("connect", container, ipv4_address))


def _controller(tmp_path: Path, policy: Any) -> tuple[FailoverController, FakeApi]:
    api = FakeApi(tmp_path / ATTACHMENT_NAME)
    move = EngineAddressMove(api, f"p_{EGRESS_NETWORK}", ADDRESSES, lambda component: f"id-{component}")
    alive = {"worker_sms_2"}  # worker_sms_1's container was killed
    controller = FailoverController(tmp_path, policy, alive.__contains__, lambda: ["worker_sms_1", "worker_sms_2"], move,
                                    reserved=ADDRESSES.reserved)
    first = controller.attach_first("worker_sms_1")
    assert first.source_for("worker_sms_1", "172.29.214.11") == "172.29.214.10"  # what worker 1 binds: its container's
    return controller, api


def test_a_failover_reattaches_the_reserved_address_to_the_standby_before_the_record_names_it(tmp_path: Path) -> None:
    controller, api = _controller(tmp_path, MoveReservedAddress())
    moved = controller.check_once()
    assert (moved.lane_holder, moved.address_holder) == ("worker_sms_2", "worker_sms_2")
    assert api.calls == [("disconnect", "id-worker_sms_1", None), ("connect", "id-worker_sms_1", "172.29.214.11"),
                         ("disconnect", "id-worker_sms_2", None), ("connect", "id-worker_sms_2", "172.29.214.10")]
    assert api.holder_during_calls == {"worker_sms_1"}  # the record changed only after the engine moved the address
    record = read_attachment(tmp_path / ATTACHMENT_NAME)
    assert record.source_for("worker_sms_2", "172.29.214.12") == "172.29.214.10"  # never the embedded 127.0.0.10


def test_negative_control_the_policy_that_keeps_the_address_moves_nothing_in_the_engine(tmp_path: Path) -> None:
    controller, api = _controller(tmp_path, KeepAddressOnLostHost())
    moved = controller.check_once()
    assert (moved.lane_holder, moved.address_holder) == ("worker_sms_2", "worker_sms_1")
    assert api.calls == []  # the standby sends from its own .12: the gateway must refuse it (403)
    assert moved.source_for("worker_sms_2", "172.29.214.12") == "172.29.214.12"


def test_the_record_is_readable_by_the_containers_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    owners = []
    monkeypatch.setattr(os, "fchown", lambda fd, uid, gid: owners.append(uid))
    FailoverController(tmp_path, MoveReservedAddress(), lambda _: True, list, owner=CONTAINER_UID).attach_first("worker_sms_1")
    assert owners == [CONTAINER_UID]
    assert oct((tmp_path / ATTACHMENT_NAME).stat().st_mode & 0o777) == "0o600"


def test_compose_runs_the_egress_scenario_and_still_refuses_what_it_cannot() -> None:
    assert unsupported_on("compose", SCENARIOS["sms_worker_failover"]) is None
    assert ComposeSpec("x", Path("r"), shape=EGRESS_SHAPE, sms_egress="move").unsupported() is None
    assert "wants {'web': 2, 'merit': 2, 'ai': 1, 'sms': 2}" in ComposeSpec("x", Path("r"), shape=EGRESS_SHAPE).unsupported()
    assert "one of ['move', 'without_address']" in ComposeSpec("x", Path("r"), shape=EGRESS_SHAPE,
                                                               sms_egress="teleport").unsupported()
    assert "sms_gateway link" in ComposeSpec("x", Path("r"), shape=EGRESS_SHAPE, sms_egress="move",
                                             links=("sms_gateway",)).unsupported()
    assert unsupported_on("compose", SCENARIOS["log_store_outage"]) is None


def test_the_standby_profile_and_the_second_host_gateway_are_there_only_for_egress_runs(tmp_path: Path) -> None:
    plain = ComposeDeployment(ComposeSpec("x", tmp_path, net_prefix="172.29.213"))
    egress = ComposeDeployment(ComposeSpec("x", tmp_path, shape=EGRESS_SHAPE, sms_egress="move", net_prefix="172.29.213",
                                           egress_prefix="172.29.214"))
    assert plain._env().get("COMPOSE_PROFILES") == os.environ.get("COMPOSE_PROFILES")
    assert egress._env()["COMPOSE_PROFILES"] == "sms-standby"
    assert plain._host_gateways() == ["172.29.213.1"]
    assert egress._host_gateways() == ["172.29.213.1", "172.29.214.1"]  # the admin forwards admit the host on both


class FakeDeployment:
    def __init__(self, reserved: str | None) -> None:
        self.reserved = reserved

    def egress(self) -> dict[str, Any]:
        return {"reserved": self.reserved} if self.reserved else {}


def test_the_checker_is_given_the_deployments_own_reserved_address() -> None:
    scenario = SCENARIOS["sms_worker_failover"]
    options = _deployment_options(scenario, FakeDeployment("172.29.214.10"))
    assert options["egress_address"] == "172.29.214.10"
    assert _deployment_options(scenario, FakeDeployment(None))["egress_address"] == "127.0.0.10"  # embedded's constant
    other = SCENARIOS["worker_kill"]
    assert "egress_address" not in _deployment_options(other, FakeDeployment("172.29.214.10"))
    assert json.dumps(options)
