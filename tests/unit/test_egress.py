"""SMS egress (issue #26, docs/egress.md): the attachment record, the failover policies and
controller, the worker's source address, the gateway's allow-list and ledger over real HTTP
from bound loopback addresses, and the host-loss fault's socket search."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from netsupport import LANE_TOKEN, ServedApp
from chaos.nemesis.host import pids_bound_to
from stack.config import Settings
from stack.deploy.egress import (ATTACHMENT_NAME, SMS_RESERVED_ADDRESS, Attachment, new_attachment, read_attachment,
                                 sms_host_address, write_attachment)
from stack.deploy.secrets import HAPROXY_SOURCE
from stack.embedded import StackError, StackSpec
from stack.deploy.egress import FailoverController, KeepAddressOnLostHost, MoveReservedAddress
from stack.embedded.egress import allowlist, failover_policy
from stack.lanes import egress as lane_egress
from stack.providers import sms


def client_from(address: str) -> httpx.Client:
    transport = httpx.HTTPTransport(local_address=address)
    return httpx.Client(transport=transport, headers={"Authorization": f"Bearer {LANE_TOKEN}"}, timeout=5.0,
                        trust_env=False)


def test_addresses_are_loopback_and_never_haproxys() -> None:
    hosts = [sms_host_address(i) for i in (1, 2, 3)]
    assert hosts == ["127.0.0.11", "127.0.0.12", "127.0.0.13"]
    assert HAPROXY_SOURCE not in {SMS_RESERVED_ADDRESS, *hosts}
    with pytest.raises(ValueError):
        sms_host_address(0)


def test_attachment_round_trip_is_private_and_names_the_source(tmp_path: Path) -> None:
    path = tmp_path / ATTACHMENT_NAME
    assert read_attachment(path) is None
    write_attachment(path, new_attachment("worker_sms_1", "worker_sms_1", "start"))
    attachment = read_attachment(path)
    assert attachment is not None and attachment.lane_holder == "worker_sms_1"
    assert path.stat().st_mode & 0o777 == 0o600
    assert attachment.source_for("worker_sms_1", "127.0.0.11") == SMS_RESERVED_ADDRESS
    assert attachment.source_for("worker_sms_2", "127.0.0.12") == "127.0.0.12"


def test_policies_move_the_address_or_leave_it_on_the_lost_host() -> None:
    current = new_attachment("worker_sms_1", "worker_sms_1", "start")
    moved = MoveReservedAddress().attach("worker_sms_1", "worker_sms_2", current)
    kept = KeepAddressOnLostHost().attach("worker_sms_1", "worker_sms_2", current)
    assert (moved.lane_holder, moved.address_holder) == ("worker_sms_2", "worker_sms_2")
    assert (kept.lane_holder, kept.address_holder) == ("worker_sms_2", "worker_sms_1")
    assert failover_policy("move").name == "move"
    with pytest.raises(StackError, match="sms_egress"):
        failover_policy("sideways")


def test_controller_fails_over_only_when_the_holder_is_gone_and_a_standby_lives(tmp_path: Path) -> None:
    alive = {"worker_sms_1": True, "worker_sms_2": True}
    controller = FailoverController(tmp_path, MoveReservedAddress(), lambda name: alive.get(name, False),
                                    lambda: ["worker_sms_1", "worker_sms_2"])
    controller.attach_first("worker_sms_1")
    assert controller.check_once() is None  # the holder lives
    alive.update(worker_sms_1=False, worker_sms_2=False)
    assert controller.check_once() is None  # nobody to take it
    alive["worker_sms_2"] = True
    promoted = controller.check_once()
    assert promoted is not None and promoted.address_holder == "worker_sms_2"
    assert controller.check_once() is None  # the new holder lives: no flapping
    events = controller.history()
    assert [(e["lost"], e["lane_holder"]) for e in events] == [(None, "worker_sms_1"), ("worker_sms_1", "worker_sms_2")]


def test_stack_spec_refuses_an_unknown_policy_and_the_sms_link() -> None:
    with pytest.raises(StackError, match="sms_egress"):
        StackSpec(sms_egress="sideways").validate()
    with pytest.raises(StackError, match="sms_gateway link"):
        StackSpec(sms_egress="move", links=("sms_gateway",)).validate()
    StackSpec(sms_egress="move", links=("ai_provider",)).validate()
    assert allowlist() == ("127.0.0.10/32",)


def test_worker_source_follows_the_attachment(tmp_path: Path) -> None:
    path = tmp_path / ATTACHMENT_NAME
    settings = Settings(run_dir=tmp_path, component="worker_sms_2", egress_host="127.0.0.12", egress_attachment=str(path))
    assert lane_egress.source_address(Settings(run_dir=tmp_path)) is None  # no egress: the OS picks
    assert lane_egress.source_address(settings) == "127.0.0.12"  # no record yet: its own host
    write_attachment(path, new_attachment("worker_sms_1", "worker_sms_1", "start"))
    assert lane_egress.source_address(settings) == "127.0.0.12" and not lane_egress.holds_lane(settings)
    write_attachment(path, new_attachment("worker_sms_2", "worker_sms_2", "moved"))
    assert lane_egress.source_address(settings) == SMS_RESERVED_ADDRESS and lane_egress.holds_lane(settings)


def test_a_standby_waits_until_it_holds_the_lane_or_is_stopped(tmp_path: Path) -> None:
    path = tmp_path / ATTACHMENT_NAME
    write_attachment(path, new_attachment("worker_sms_1", "worker_sms_1", "start"))
    settings = Settings(run_dir=tmp_path, component="worker_sms_2", egress_attachment=str(path))
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    assert lane_egress.wait_for_lane(settings, stop) is False
    holder = Settings(run_dir=tmp_path, component="worker_sms_1", egress_attachment=str(path))
    assert lane_egress.wait_for_lane(holder, stop) is False  # a stop already asked for wins over the lane
    threading.Timer(0.2, lambda: write_attachment(path, new_attachment("worker_sms_2", None, "lane only"))).start()
    assert lane_egress.wait_for_lane(settings, threading.Event()) is True


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[str]:
    settings = Settings(run_dir=tmp_path, time_scale=0.001, sms_client_token=LANE_TOKEN, sms_allowlist=allowlist())
    with ServedApp(sms.create_app(settings)) as served:
        yield served.url


def ledger(url: str) -> dict:
    return httpx.get(f"{url}/admin/ledger", headers={"X-Admin-Token": "proctor-admin"}, timeout=5).json()


def test_gateway_accepts_exactly_the_reserved_address_and_records_the_source(gateway: str) -> None:
    body = {"operation_id": "sms-a1", "to": "student:s1", "body": "NOVA-101: 7/20"}
    with client_from("127.0.0.12") as standby, client_from(SMS_RESERVED_ADDRESS) as holder:
        refused = standby.post(f"{gateway}/v1/messages", json=body)
        assert refused.status_code == 403 and "127.0.0.12" in refused.json()["detail"]
        assert holder.post(f"{gateway}/v1/messages", json=body).status_code == 201
    document = ledger(gateway)
    assert [(e["operation_id"], e["source"]) for e in document["effects"]] == [("sms-a1", SMS_RESERVED_ADDRESS)]
    assert [(r["operation_id"], r["status"], r["source"]) for r in document["refusals"]] == [("sms-a1", 403, "127.0.0.12")]


def test_a_wrong_credential_from_the_reserved_address_is_401_not_403(gateway: str) -> None:
    body = {"operation_id": "sms-a1", "to": "student:s1", "body": "x"}
    with client_from(SMS_RESERVED_ADDRESS) as holder:
        assert holder.post(f"{gateway}/v1/messages", json=body, headers={"Authorization": "Bearer wrong"}).status_code == 401
    with client_from("127.0.0.12") as standby:  # the address rule first, whatever the credential
        assert standby.post(f"{gateway}/v1/messages", json=body, headers={"Authorization": "Bearer wrong"}).status_code == 403


def test_pids_bound_to_finds_a_process_holding_a_socket_on_the_address_only() -> None:
    code = ("import socket, sys, time; s = socket.socket(); s.bind(('127.0.0.13', 0)); s.listen(); "
            "print('up', flush=True); time.sleep(30)")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == b"up"
        assert child.pid in pids_bound_to({"127.0.0.13"})
        assert child.pid not in pids_bound_to({"127.0.0.14"})
        assert os.getpid() not in pids_bound_to({"127.0.0.1"})  # never the caller itself
    finally:
        os.kill(child.pid, signal.SIGKILL)  # by pid: the one process this test started
        child.wait(timeout=5)
        if child.stdout is not None:
            child.stdout.close()
    deadline = time.monotonic() + 5
    while child.pid in pids_bound_to({"127.0.0.13"}) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert child.pid not in pids_bound_to({"127.0.0.13"})


def test_attachment_dataclass_is_what_the_file_holds(tmp_path: Path) -> None:
    attachment = Attachment("worker_sms_1", None, SMS_RESERVED_ADDRESS, 1.0, "x")
    write_attachment(tmp_path / "a.json", attachment)
    assert read_attachment(tmp_path / "a.json") == attachment
