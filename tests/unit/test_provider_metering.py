"""The fake AI provider as a metered API: its own sliding calls/min limit, credit, a
revoked key, invalid payloads and a response lost after the effect (issue #11)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from netsupport import LANE_TOKEN, ServedApp, lane_client
from chaos.nemesis import FaultSpec, NemesisError, ProviderNemesis
from stack.config import Settings
from stack.providers import ai
from stack.providers.faults import Admission, FaultState, Faults, Refusal

ADMIN = {"X-Admin-Token": "proctor-admin"}


LANES = lane_client()  # calls as the lanes make them: with their per-run bearer token

@pytest.fixture
def ai_url(tmp_path: Path) -> Iterator[str]:
    with ServedApp(ai.create_app(Settings(run_dir=tmp_path, time_scale=0.001, ai_client_token=LANE_TOKEN, sms_client_token=LANE_TOKEN))) as served:
        yield served.url


def narrative(op: str) -> dict[str, Any]:
    return {"operation_id": op, "attempt_id": "a1", "score": 7, "position": 2}


def call(url: str, op: str) -> httpx.Response:
    return LANES.post(f"{url}/v1/narratives", json=narrative(op), headers={"Idempotency-Key": op})


def set_knobs(url: str, **knobs: Any) -> dict[str, Any]:
    response = LANES.put(f"{url}/admin/faults", json=knobs, headers=ADMIN)
    assert response.status_code == 200, response.text
    return response.json()


def ledger(url: str) -> list[dict[str, Any]]:
    return LANES.get(f"{url}/admin/ledger", headers=ADMIN).json()["effects"]


def test_window_admits_the_limit_then_answers_429_until_the_oldest_call_leaves() -> None:
    state = FaultState(window_seconds=60.0)
    state.set(Faults(calls_per_minute=2))
    assert isinstance(state.admit("a", now=100.0), Admission)
    assert isinstance(state.admit("b", now=130.0), Admission)
    refused = state.admit("c", now=150.0)
    assert isinstance(refused, Refusal) and refused.status == 429
    assert refused.body["retry_after_seconds"] == pytest.approx(10.0)  # "a" leaves at 160
    assert refused.headers == {"Retry-After": "10"}
    assert isinstance(state.admit("c", now=160.0), Admission)  # sliding: one slot freed, not a new window
    assert isinstance(state.admit("d", now=170.0), Refusal)  # "b" (130) and "c" (160) still inside


def test_credit_is_debited_per_call_then_402_and_a_replay_is_refunded() -> None:
    state = FaultState()
    state.set(Faults(credit_balance=2.5, cost_per_call=1.0))
    first = state.admit("a", now=1.0)
    assert isinstance(first, Admission) and first.cost == 1.0
    state.refund(first)  # an idempotent replay made no new effect
    assert isinstance(state.admit("a", now=2.0), Admission)
    assert isinstance(state.admit("b", now=3.0), Admission)
    refused = state.admit("c", now=4.0)
    assert isinstance(refused, Refusal) and refused.status == 402
    assert state.current().credit_balance == pytest.approx(0.5)


def test_revoked_key_and_invalid_payload_refuse_before_any_slot_or_charge() -> None:
    state = FaultState()
    state.set(Faults(key_revoked=True, credit_balance=5.0, invalid_operations=("bad",)))
    assert state.admit("a").status == 401  # type: ignore[union-attr]
    state.set(Faults(credit_balance=5.0, invalid_operations=("bad",)))
    assert state.admit("bad").status == 422  # type: ignore[union-attr]
    assert state.current().credit_balance == 5.0


@pytest.mark.parametrize("knobs, field", [({"calls_per_minute": 0}, "calls_per_minute"),
                                          ({"credit_balance": -1}, "credit_balance"),
                                          ({"invalid_operations": "op"}, "invalid_operations"),
                                          ({"lose_response_next": -1}, "lose_response_next")])
def test_bad_metering_knobs_name_the_field(ai_url: str, knobs: dict[str, Any], field: str) -> None:
    response = LANES.put(f"{ai_url}/admin/faults", json=knobs, headers=ADMIN)
    assert response.status_code == 422 and field in response.text


def test_ledger_records_arrival_and_cost_and_the_balance_runs_out(ai_url: str) -> None:
    set_knobs(ai_url, credit_balance=2.0, cost_per_call=0.75)
    # The repeat of n1 replays the recorded call and is refunded, so n2 can still be paid.
    assert [call(ai_url, op).status_code for op in ("n1", "n1", "n2", "n3")] == [201, 201, 201, 402]
    rows = ledger(ai_url)
    assert [(row["operation_id"], row["cost"]) for row in rows] == [("n1", 0.75), ("n2", 0.75)]
    assert all(row["started_at"] <= row["created_at"] for row in rows)
    assert LANES.get(f"{ai_url}/admin/faults", headers=ADMIN).json()["credit_balance"] == pytest.approx(0.5)


def test_the_ledger_export_lists_each_refusal_with_its_exact_retry_after(ai_url: str) -> None:
    assert call(ai_url, "narrative-ok").status_code == 201
    set_knobs(ai_url, fail_next=1, fail_next_status=429, retry_after_seconds=0.25)
    assert call(ai_url, "narrative-429").status_code == 429
    set_knobs(ai_url, credit_balance=0.0)
    assert call(ai_url, "narrative-402").status_code == 402
    body = LANES.get(f"{ai_url}/admin/ledger", headers=ADMIN).json()
    assert [e["operation_id"] for e in body["effects"]] == ["narrative-ok"]
    refusals = [(r["operation_id"], r["status"], r["retry_after_seconds"]) for r in body["refusals"]]
    assert refusals == [("narrative-429", 429, 0.25), ("narrative-402", 402, None)]
    assert body["refusals"][0]["at"] > body["effects"][0]["started_at"]  # arrival times, in order


def received_at(response: httpx.Response) -> float:
    return float(response.headers["X-Received-At"])


def test_every_answer_says_when_the_provider_received_the_call(ai_url: str) -> None:
    """X-Received-At (the fake's extension) is the arrival its own ledger counts from: the
    effect's started_at, the refusal's at, and a replay's own arrival (not the first call's)."""
    first, replay = call(ai_url, "n1"), call(ai_url, "n1")
    set_knobs(ai_url, fail_next=1, fail_next_status=429, retry_after_seconds=0.25)
    throttled = call(ai_url, "n2")
    set_knobs(ai_url, key_revoked=True)
    revoked = call(ai_url, "n3")
    body = LANES.get(f"{ai_url}/admin/ledger", headers=ADMIN).json()
    assert received_at(first) == pytest.approx(body["effects"][0]["started_at"], abs=1e-6)
    assert replay.headers["Idempotent-Replayed"] == "true" and received_at(replay) > received_at(first)
    assert [received_at(r) for r in (throttled, revoked)] == pytest.approx(
        [r["at"] for r in body["refusals"]], abs=1e-6)
    assert received_at(throttled) < received_at(revoked)


def test_revoked_key_over_http_is_401_and_no_effect(ai_url: str) -> None:
    set_knobs(ai_url, key_revoked=True)
    assert call(ai_url, "n1").status_code == 401
    assert ledger(ai_url) == []


def test_lost_response_is_charged_recorded_and_found_by_operation_id(ai_url: str) -> None:
    set_knobs(ai_url, lose_response_next=1, credit_balance=10.0)
    with pytest.raises(httpx.RemoteProtocolError):
        call(ai_url, "n1")
    found = LANES.get(f"{ai_url}/v1/narratives/n1").json()
    assert found["effects"] == 1 and found["response"]["operation_id"] == "n1"
    assert call(ai_url, "n1").json() == found["response"]  # asked again with the key: no second charge
    assert [row["operation_id"] for row in ledger(ai_url)] == ["n1"]
    assert LANES.get(f"{ai_url}/admin/faults", headers=ADMIN).json()["credit_balance"] == 9.0


def test_provider_nemesis_sets_knobs_for_the_fault_and_restores_them(ai_url: str) -> None:
    nemesis = ProviderNemesis({"ai": ai_url}, admin_token="proctor-admin")
    set_knobs(ai_url, latency_seconds=0.01)
    fault = FaultSpec(at=0, kind="provider", target="ai", duration=1, params={"key_revoked": True})
    assert nemesis.start(fault)["knobs"]["key_revoked"] is True
    assert call(ai_url, "n1").status_code == 401
    nemesis.end(fault)
    restored = LANES.get(f"{ai_url}/admin/faults", headers=ADMIN).json()
    assert (restored["key_revoked"], restored["latency_seconds"]) == (False, 0.01)
    with pytest.raises(NemesisError, match="unknown provider 'llm'"):
        nemesis.start(FaultSpec(at=0, kind="provider", target="llm", duration=1))
    with pytest.raises(NemesisError, match="calls_per_minute"):
        nemesis.start(FaultSpec(at=0, kind="provider", target="ai", duration=1, params={"calls_per_minute": 0}))
