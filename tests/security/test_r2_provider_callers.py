"""Issue #21 finding 3: the fake providers' data APIs trusted anyone on loopback.

The attacker (``nobody``, no run folder) holds one student's own session token. It
- reads its own merit card, which must not list the other attempts it was ranked against
  (the admin export keeps the whole list: the checkers read it there);
- asks the SMS gateway and the AI provider for a victim's message and narrative, with no
  token and with its student token: both refused;
- races the SMS lane with a forged text under the victim's Idempotency-Key, before the
  victim finishes: refused, and the victim's ledger SMS outcome is the genuine one.
"""

from __future__ import annotations

import json

import pytest

from lane_stack import Student, export, port_of, run_folder, wait_for_outcome
from local_attacker import run_as_nobody
from stack.embedded.stack import EmbeddedStack

pytestmark = pytest.mark.integration

CALLS = """
calls = json.loads(sys.argv[1])
seen = []
for method, url, headers, body in calls:
    reply = httpx.request(method, url, headers=headers, json=body, timeout=10, trust_env=False)
    seen.append([reply.status_code, reply.text[:300]])
emit(seen=seen)
"""


def _as_attacker(stack: EmbeddedStack, calls: list[list[object]]) -> list[list[object]]:
    return run_as_nobody(CALLS, json.dumps(calls), run_dir=run_folder(stack))["seen"]


def _sat(stack: EmbeddedStack, index: int) -> tuple[Student, str]:
    student = Student(stack, index)
    attempt = student.start()
    student.answer_and_finish(attempt)
    return student, attempt


def test_a_student_sees_no_other_attempt_id_and_the_export_keeps_them(lane_stack: EmbeddedStack) -> None:
    _, victim_attempt = _sat(lane_stack, 0)
    attacker, own = _sat(lane_stack, 1)
    card = attacker.merit_card(own)
    assert victim_attempt not in json.dumps(card), f"the student's card names another attempt: {card}"
    stored = next(row for row in export(lane_stack, "outcomes") if row["operation_id"] == f"merit-{own}")
    assert victim_attempt in stored["payload"]["ranked_against"]  # the checkers' copy stays whole
    assert card["ranked_against_count"] == len(stored["payload"]["ranked_against"])


def test_a_victims_sms_and_narrative_cannot_be_read(lane_stack: EmbeddedStack) -> None:
    victim, victim_attempt = _sat(lane_stack, 2)
    attacker = Student(lane_stack, 3)
    victim.merit_card(victim_attempt)
    wait_for_outcome(lane_stack, f"sms-{victim_attempt}")
    wait_for_outcome(lane_stack, f"narrative-{victim_attempt}")
    urls = lane_stack.urls
    reads = [f"{urls['sms_gateway']}/v1/messages/sms-{victim_attempt}",
             f"{urls['ai_provider']}/v1/narratives/narrative-{victim_attempt}"]
    calls = [["GET", url, headers, None] for url in reads for headers in ({}, attacker.auth)]
    seen = _as_attacker(lane_stack, calls)
    assert [status for status, _ in seen] == [401] * len(calls), seen
    assert not any(victim.student_id in text for _, text in seen)


def test_a_forged_sms_cannot_race_the_lane(lane_stack: EmbeddedStack) -> None:
    victim, attacker = Student(lane_stack, 4), Student(lane_stack, 5)
    victim_attempt = victim.start()
    operation = f"sms-{victim_attempt}"
    forged = {"operation_id": operation, "to": f"student:{victim.student_id}", "body": "NOVA-101: you scored 0/20, position 999."}
    url = f"{lane_stack.urls['sms_gateway']}/v1/messages"
    seen = _as_attacker(lane_stack, [["POST", url, {"Idempotency-Key": operation, **headers}, forged]
                                     for headers in ({}, attacker.auth)])
    victim.answer_and_finish(victim_attempt)  # the lane sends the genuine text after the forgery tried
    card = victim.merit_card(victim_attempt)
    outcome = wait_for_outcome(lane_stack, operation)
    assert "position 999" not in outcome["payload"]["body"], f"the ledger holds the forged SMS: {outcome}"
    assert f"position {card['position']}" in outcome["payload"]["body"]
    assert [status for status, _ in seen] == [401, 401], seen
    effects = [effect for effect in _gateway_effects(lane_stack) if effect["operation_id"] == operation]
    assert len(effects) == 1 and "position 999" not in json.dumps(effects), effects


def _gateway_effects(stack: EmbeddedStack) -> list[dict[str, object]]:
    import httpx

    with httpx.Client(trust_env=False, timeout=10) as client:
        ledger = client.get(f"{stack.urls['sms_gateway']}/admin/ledger", headers={"X-Admin-Token": stack.settings.admin_token})
    ledger.raise_for_status()
    return ledger.json()["effects"]


def test_ports_are_what_the_attacker_reaches(lane_stack: EmbeddedStack) -> None:
    """The attacker reaches the providers at all (a refusal above is the provider's, not a closed port)."""
    seen = _as_attacker(lane_stack, [["GET", f"{lane_stack.urls[name]}/healthz", {}, None] for name in ("sms_gateway", "ai_provider")])
    assert [status for status, _ in seen] == [200, 200], seen
    assert port_of(lane_stack.urls["sms_gateway"]).isdigit()
