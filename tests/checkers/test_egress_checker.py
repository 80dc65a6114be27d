"""chaos/checkers/egress.py on hand-written histories and gateway exports: each failing export
puts its anomaly after valid messages (a scan that stops at the first good one misses it)."""

from __future__ import annotations

from typing import Any

import pytest

from chaos.checkers.base import UNKNOWN, OptionsError
from chaos.checkers.egress import EgressOptions, check_egress, derive_sms_bound, host_losses
from chaos.history import Op
from chaos.ledgers import EffectRow, Ledgers

ALLOWED = "127.0.0.10"
OPTIONS = EgressOptions(egress_address=ALLOWED)


def attempt(n: int, finished_at: float) -> dict[str, Any]:
    return {"attempt_id": f"a{n}", "status": "finished", "finished_at": finished_at}


def message(n: int, at: float, source: str = ALLOWED, effect_id: int | None = None) -> dict[str, Any]:
    return {"id": effect_id or n, "operation_id": f"sms-a{n}", "created_at": at, "started_at": at - 0.01, "source": source}


def loss(at: float, fault_id: int = 0) -> list[Op]:
    start = {"fault_id": fault_id, "kind": "host_loss", "target": "worker_sms_1", "at": 4.0, "duration": 7.0, "killed_at": at}
    end = {"fault_id": fault_id, "kind": "host_loss", "target": "worker_sms_1", "egress": {"events": []}}
    return [Op(0, 4.0, "nemesis", "info", "fault-start", start), Op(1, 11.0, "nemesis", "info", "fault-end", end)]


def ledgers(attempts: list[dict], messages: list[dict], **more: Any) -> Ledgers:
    return Ledgers.from_exports(attempts=attempts, sms_effects={"provider": "sms", "effects": messages}, **more)


# Three attempts finish before the loss at 105 (delivered within 0.5 s), two after it; the
# standby's first message lands at 106: failover 1 s.
ATTEMPTS = [attempt(1, 100.0), attempt(2, 101.0), attempt(3, 104.8), attempt(4, 105.5), attempt(5, 107.0)]
GOOD = [message(1, 100.5), message(2, 101.2), message(3, 106.0), message(4, 106.3), message(5, 107.4)]


def test_every_sms_once_from_the_allowed_address_across_a_failover_is_valid_with_the_derivation() -> None:
    result = check_egress(loss(105.0), ledgers(ATTEMPTS, GOOD), OPTIONS)
    assert result.valid is True, result.to_dict()
    bound = result.details["sms_bound"]
    # F = 106 - 105; L = worst before the loss (0.5); B = attempts 3 and 4 waiting at 106 -> 1 + 3 x 0.5
    assert (bound["failover_seconds"], bound["worst_lateness_before"], bound["backlog"], bound["value"]) == (1.0, 0.5, 2, 2.5)
    assert "max(F 1.000 s, R 0.000 s) + (B 2 + 1) x L 0.500 s = 2.500 s" in result.notes[0]


def test_the_job_the_lost_host_held_is_excused_for_the_recovery_time_and_no_longer() -> None:
    messages = [*GOOD[:4], message(5, 107.0 + 3.45)]  # past 2.5 s, inside max(F, R 2.0) + 1.5
    with_recovery = EgressOptions(egress_address=ALLOWED, in_flight_recovery=2.0)
    assert check_egress(loss(105.0), ledgers(ATTEMPTS, messages), with_recovery).valid is True
    late = [*GOOD[:4], message(5, 107.0 + 3.45)]
    assert check_egress(loss(105.0), ledgers(ATTEMPTS, late), OPTIONS).valid is False
    assert check_egress(loss(105.0), ledgers(ATTEMPTS, [*GOOD[:4], message(5, 107.0 + 3.45)]),
                        EgressOptions(egress_address=ALLOWED, in_flight_recovery=1.9)).valid is False


def test_an_sms_missing_after_delivered_ones_is_not_delivered_with_the_alert_as_evidence() -> None:
    alerts = {"table": "alerts", "rows": [{"lane": "sms", "kind": "egress_refused", "at": 106.0, "detail": {"status": 403}}]}
    refusals = [{"operation_id": "sms-a5", "at": 107.1, "status": 403, "source": "127.0.0.12"}]
    exports = ledgers(ATTEMPTS, GOOD[:4], alerts=alerts)
    exports = Ledgers(**{**exports.__dict__, "sms_refusals": Ledgers.from_exports(
        sms_refusals={"provider": "sms", "effects": [], "refusals": refusals}).sms_refusals})
    result = check_egress(loss(105.0), exports, OPTIONS)
    assert result.valid is False
    assert result.counts["not_delivered"] == 1 and result.examples["not_delivered"][0]["operation_id"] == "sms-a5"
    assert result.counts["alerts"] == 1 and result.counts["refused_403"] == 1
    assert any("evidence: lane alerts ['egress_refused'], 1 gateway 403" in note for note in result.notes)


def test_a_second_message_for_one_operation_is_duplicated() -> None:
    result = check_egress(loss(105.0), ledgers(ATTEMPTS, [*GOOD, message(5, 107.6, effect_id=6)]), OPTIONS)
    assert result.valid is False and result.counts["duplicated"] == 1


def test_a_message_from_another_address_is_wrong_source() -> None:
    messages = [*GOOD[:4], message(5, 107.4, source="127.0.0.12")]
    result = check_egress(loss(105.0), ledgers(ATTEMPTS, messages), OPTIONS)
    assert result.valid is False
    assert result.examples["wrong_source"] == [{"operation_id": "sms-a5", "source": "127.0.0.12", "allowed": ALLOWED}]


def test_a_message_later_than_the_derived_bound_is_late() -> None:
    messages = [*GOOD[:4], message(5, 107.0 + 2.6)]  # bound 2.5 s (the first test's derivation)
    result = check_egress(loss(105.0), ledgers(ATTEMPTS, messages), OPTIONS)
    assert result.valid is False
    assert result.examples["late"] == [{"operation_id": "sms-a5", "lateness": 2.6, "bound": 2.5}]


def test_just_inside_the_bound_is_on_time() -> None:
    messages = [*GOOD[:4], message(5, 107.0 + 2.5)]
    assert check_egress(loss(105.0), ledgers(ATTEMPTS, messages), OPTIONS).valid is True


def test_a_message_without_a_recorded_source_leaves_the_proof_unknown() -> None:
    messages = [*GOOD[:4], {**message(5, 107.4), "source": ""}]
    result = check_egress(loss(105.0), ledgers(ATTEMPTS, messages), OPTIONS)
    assert result.valid == UNKNOWN and "without a recorded source" in result.notes[-1]


def test_without_an_egress_address_it_is_not_applicable_and_without_ledgers_unknown() -> None:
    assert check_egress([], ledgers(ATTEMPTS, GOOD), EgressOptions()).na is not None
    assert check_egress([], Ledgers(), OPTIONS).valid == UNKNOWN


def test_without_a_host_loss_no_bound_is_judged() -> None:
    result = check_egress([], ledgers(ATTEMPTS, GOOD), OPTIONS)
    assert result.valid is True and result.details["sms_bound"] == {"value": None, "why": "no host loss"}


def test_the_bound_needs_messages_on_both_sides_of_the_loss() -> None:
    first = {e.operation_id: e for e in (EffectRow("sms-a1", created_at=100.5),)}
    assert derive_sms_bound({"sms-a1": 100.0}, first, 105.0)["why"] == "no message after the host loss"
    assert derive_sms_bound({"sms-a1": 100.0}, first, 99.0)["why"] == "no message before the host loss"


def test_host_losses_pair_starts_with_ends_and_skip_other_faults_and_failed_injections() -> None:
    other = Op(2, 1.0, "nemesis", "info", "fault-start", {"fault_id": 1, "kind": "kill", "killed_at": 1.0})
    failed = Op(3, 2.0, "nemesis", "info", "fault-start", {"fault_id": 2, "kind": "host_loss", "error": "x"})
    [found] = host_losses([other, failed, *loss(105.0)])
    assert found["killed_at"] == 105.0 and found["end"]["egress"] == {"events": []}


def test_egress_address_option_must_be_one_ip_address() -> None:
    assert EgressOptions.from_dict({"egress_address": "127.0.0.10"}).egress_address == "127.0.0.10"
    with pytest.raises(OptionsError, match="egress_address"):
        EgressOptions.from_dict({"egress_address": "127.0.0.0/8"})


def test_counts_delivered_and_needs_both_ledgers() -> None:
    result = check_egress(loss(105.0), ledgers(ATTEMPTS, GOOD[:4]), OPTIONS)
    assert (result.counts["finished"], result.counts["delivered"]) == (5, 4)
    only_attempts = Ledgers.from_exports(attempts=ATTEMPTS)
    assert check_egress([], only_attempts, OPTIONS).valid == UNKNOWN


def test_the_evidence_note_needs_an_undelivered_sms_and_either_an_alert_or_a_403() -> None:
    refusals = Ledgers.from_exports(sms_refusals={"provider": "sms", "effects": [], "refusals": [
        {"operation_id": "sms-a5", "at": 107.1, "status": 403, "source": "127.0.0.12"}]}).sms_refusals
    missing = ledgers(ATTEMPTS, GOOD[:4])
    with_403 = check_egress(loss(105.0), Ledgers(**{**missing.__dict__, "sms_refusals": refusals}), OPTIONS)
    assert any("evidence: lane alerts (none), 1 gateway 403" in note for note in with_403.notes)
    alerts = {"table": "alerts", "rows": [{"lane": "sms", "kind": "egress_refused", "at": 106.0}]}
    delivered = check_egress(loss(105.0), ledgers(ATTEMPTS, GOOD, alerts=alerts), OPTIONS)
    assert delivered.valid is True and not any("evidence" in note for note in delivered.notes)


def test_the_declared_recovery_is_the_liveness_ttl_plus_one_relay_pass() -> None:
    from chaos.checkers.egress import declared_recovery

    assert declared_recovery({"settings": {"liveness_ttl": 3.0, "relay_interval": 0.5}}) == 3.5
    assert declared_recovery({"settings": {"liveness_ttl": 3.0}}) is None
    assert declared_recovery({}) is None


def test_a_duplicated_operations_lateness_is_its_first_message_whatever_the_ledgers_order() -> None:
    """The duplicate is caught, and the bound judges the earliest delivery: a later copy listed
    first must not make the SMS look late."""
    copies = [*GOOD[:4], message(5, 107.0 + 9.0, effect_id=7), message(5, 107.4)]
    result = check_egress(loss(105.0), ledgers(ATTEMPTS, copies), OPTIONS)
    assert result.counts["duplicated"] == 1 and result.counts["late"] == 0, result.to_dict()
