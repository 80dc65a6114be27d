"""Fake providers over real HTTP (uvicorn in a thread): idempotency, allow-list, faults, admin."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from netsupport import LANE_TOKEN, ServedApp, lane_client
from stack.config import Settings
from stack.providers import ai, sms
from stack.providers.ledger import EffectLedger

ADMIN = {"X-Admin-Token": "proctor-admin"}




LANES = lane_client()  # calls as the lanes make them: with their per-run bearer token

@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(run_dir=tmp_path, time_scale=0.001, ai_client_token=LANE_TOKEN, sms_client_token=LANE_TOKEN)


@pytest.fixture
def ai_url(settings: Settings) -> Iterator[str]:
    with ServedApp(ai.create_app(settings)) as served:
        yield served.url


@pytest.fixture
def sms_url(settings: Settings) -> Iterator[str]:
    with ServedApp(sms.create_app(settings)) as served:
        yield served.url


def narrative(op: str = "narrative-a1") -> dict[str, Any]:
    return {"operation_id": op, "attempt_id": "a1", "score": 7, "position": 2}


def message(op: str = "sms-a1") -> dict[str, Any]:
    return {"operation_id": op, "to": "student:s1", "body": "NOVA-101: 7/20"}


def effects(url: str) -> list[dict[str, Any]]:
    body = LANES.get(f"{url}/admin/ledger", headers=ADMIN).json()
    return body["effects"]


def test_same_key_twice_is_one_effect_with_the_stored_response(ai_url: str) -> None:
    first = LANES.post(f"{ai_url}/v1/narratives", json=narrative(), headers={"Idempotency-Key": "narrative-a1"})
    second = LANES.post(f"{ai_url}/v1/narratives", json=narrative(), headers={"Idempotency-Key": "narrative-a1"})
    assert (first.status_code, second.status_code) == (201, 201)
    assert second.json() == first.json()
    assert second.headers["Idempotent-Replayed"] == "true" and "Idempotent-Replayed" not in first.headers
    assert [(e["operation_id"], e["idempotency_key"]) for e in effects(ai_url)] == [("narrative-a1", "narrative-a1")]


def test_no_key_twice_is_two_effects_both_recording_the_operation(sms_url: str) -> None:
    for _ in range(2):
        assert LANES.post(f"{sms_url}/v1/messages", json=message()).status_code == 201
    rows = effects(sms_url)
    assert [(e["operation_id"], e["idempotency_key"]) for e in rows] == [("sms-a1", None), ("sms-a1", None)]
    assert rows[0]["request"] == message()
    assert LANES.get(f"{sms_url}/v1/messages/sms-a1").json()["effects"] == 2


def test_key_reused_with_another_body_is_refused(sms_url: str) -> None:
    LANES.post(f"{sms_url}/v1/messages", json=message(), headers={"Idempotency-Key": "k"})
    other = {**message(), "body": "something else"}
    assert LANES.post(f"{sms_url}/v1/messages", json=other, headers={"Idempotency-Key": "k"}).status_code == 409
    assert len(effects(sms_url)) == 1


def test_concurrent_repeats_of_one_key_make_one_effect(sms_url: str) -> None:
    def send() -> int:
        return LANES.post(f"{sms_url}/v1/messages", json=message(), headers={"Idempotency-Key": "sms-a1"}).status_code

    results: list[int] = []
    threads = [threading.Thread(target=lambda: results.append(send())) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [201] * 8
    assert len(effects(sms_url)) == 1


def test_sms_refuses_a_source_outside_the_allowlist(settings: Settings) -> None:
    app = sms.create_app(settings.with_overrides(sms_allowlist=("10.0.0.0/8",)))
    with ServedApp(app) as served:
        response = LANES.post(f"{served.url}/v1/messages", json=message())
        assert response.status_code == 403
        assert "allow-list" in response.json()["detail"]
        assert effects(served.url) == []


def test_lookup_by_operation(ai_url: str) -> None:
    assert LANES.get(f"{ai_url}/v1/narratives/narrative-a1").status_code == 404
    created = LANES.post(f"{ai_url}/v1/narratives", json=narrative()).json()
    found = LANES.get(f"{ai_url}/v1/narratives/narrative-a1").json()
    assert found == {"operation_id": "narrative-a1", "effects": 1, "response": created}


@pytest.mark.parametrize("status", [429, 402, 401, 500])
def test_forced_status_answers_without_an_effect(ai_url: str, status: int) -> None:
    knobs = LANES.put(f"{ai_url}/admin/faults", json={"status": status, "retry_after_seconds": 7}, headers=ADMIN)
    assert knobs.status_code == 200 and knobs.json()["status"] == status
    response = LANES.post(f"{ai_url}/v1/narratives", json=narrative(), headers={"Idempotency-Key": "k"})
    assert response.status_code == status
    assert response.headers.get("Retry-After") == ("7" if status == 429 else None)
    assert effects(ai_url) == []
    LANES.delete(f"{ai_url}/admin/faults", headers=ADMIN)
    assert LANES.post(f"{ai_url}/v1/narratives", json=narrative(), headers={"Idempotency-Key": "k"}).status_code == 201


def test_fail_next_fails_n_calls_then_recovers(sms_url: str) -> None:
    LANES.put(f"{sms_url}/admin/faults", json={"fail_next": 2, "fail_next_status": 429}, headers=ADMIN)
    codes = [LANES.post(f"{sms_url}/v1/messages", json=message()).status_code for _ in range(3)]
    assert codes == [429, 429, 201]
    assert len(effects(sms_url)) == 1


def test_latency_delays_the_answer(sms_url: str) -> None:
    LANES.put(f"{sms_url}/admin/faults", json={"latency_seconds": 0.3}, headers=ADMIN)
    started = time.monotonic()
    LANES.post(f"{sms_url}/v1/messages", json=message())
    assert time.monotonic() - started >= 0.3


def test_delay_after_effect_records_before_answering(sms_url: str, settings: Settings) -> None:
    LANES.put(f"{sms_url}/admin/faults", json={"delay_after_effect_seconds": 1.0}, headers=ADMIN)
    with pytest.raises(httpx.ReadTimeout):
        LANES.post(f"{sms_url}/v1/messages", json=message(), timeout=0.4)
    # The caller gave up, yet the message went out: the unknown-outcome window.
    assert [e.operation_id for e in EffectLedger(settings.run_dir / "sms_effects.db").all()] == ["sms-a1"]


def test_bad_fault_knobs_are_refused(ai_url: str) -> None:
    assert LANES.put(f"{ai_url}/admin/faults", json={"status": 418}, headers=ADMIN).status_code == 422
    assert LANES.put(f"{ai_url}/admin/faults", json={"nonsense": 1}, headers=ADMIN).status_code == 422
    assert LANES.put(f"{ai_url}/admin/faults", json={"latency_seconds": -1}, headers=ADMIN).status_code == 422


def test_admin_needs_the_token_and_exports_the_contract_shape(ai_url: str) -> None:
    assert LANES.get(f"{ai_url}/admin/ledger").status_code == 403
    assert LANES.get(f"{ai_url}/admin/ledger", headers={"X-Admin-Token": "wrong"}).status_code == 403
    created = LANES.post(f"{ai_url}/v1/narratives", json=narrative()).json()
    body = LANES.get(f"{ai_url}/admin/ledger", headers=ADMIN).json()
    assert body["provider"] == "ai" and isinstance(body["exported_at"], float)
    assert set(body["effects"][0]) == {"id", "operation_id", "idempotency_key", "created_at", "started_at", "cost",
                                     "source", "request", "response"}
    assert body["effects"][0]["response"] == created  # what the caller was told, for the payloads checker


def test_ai_call_takes_scaled_case_time(tmp_path: Path) -> None:
    with ServedApp(ai.create_app(Settings(run_dir=tmp_path, time_scale=0.03, ai_client_token=LANE_TOKEN, sms_client_token=LANE_TOKEN))) as served:  # 10 s case -> 0.3 s
        started = time.monotonic()
        LANES.post(f"{served.url}/v1/narratives", json=narrative())
        assert time.monotonic() - started >= 0.3


def post(ai_url: str, op: str) -> None:
    response = LANES.post(f"{ai_url}/v1/narratives", json=narrative(op), headers={"Idempotency-Key": op})
    assert response.status_code == 201, response.text


class _Stack:
    """What ``answer_held`` reads of a deployment: the providers' URLs and the admin token."""

    def __init__(self, ai_url: str) -> None:
        self.urls = {"ai_provider": ai_url}
        self.settings = Settings(admin_token=ADMIN["X-Admin-Token"])


TIMED = {"after_effect_at": "ai_provider", "wait_busy": 5.0}


def test_a_held_answer_goes_only_after_the_strike_however_long_it_takes(ai_url: str) -> None:
    """The failover and worker-kill nemeses strike on this: after a commit, before its answer, and
    the answer waits for the strike to be over, not for a clock a slow strike can outlive."""
    from chaos.nemesis.provider import after_effect_timing, answer_held

    post(ai_url, "narrative-before")  # answered before the hold was armed: never held
    # The provider works 0.3 s before it records, so the call below is recorded after the hold is armed.
    LANES.put(f"{ai_url}/admin/faults", json={"latency_seconds": 0.3}, headers=ADMIN)
    caller = threading.Thread(target=post, args=(ai_url, "narrative-a1"))
    caller.start()
    with answer_held(_Stack(ai_url), TIMED) as held:
        assert held is not None and held.effect is not None
        time.sleep(1.5)  # a strike slower than the 1 s fixed hold that a CI run outlived
        answered_during_strike = not caller.is_alive()
        struck_at = time.time()
    caller.join(timeout=10)
    [effect] = [e for e in LANES.get(f"{ai_url}/admin/ledger", headers=ADMIN).json()["effects"]
                if e["operation_id"] == "narrative-a1"]
    assert held.effect == {"id": effect["id"], "created_at": effect["created_at"]}
    assert not answered_during_strike and not caller.is_alive()
    timing = after_effect_timing(held, struck_at)
    assert timing["after_effect"] is True and timing["effect_age_at_kill"] >= 1.5, timing
    assert timing["answer_released_after_kill"] >= 0, timing
    assert LANES.get(f"{ai_url}/admin/hold", headers=ADMIN).json() == {"armed": False, "held": []}


def test_a_strike_that_fails_still_lets_the_held_answer_go(ai_url: str) -> None:
    from chaos.nemesis.provider import answer_held

    LANES.put(f"{ai_url}/admin/faults", json={"latency_seconds": 0.3}, headers=ADMIN)
    caller = threading.Thread(target=post, args=(ai_url, "narrative-a1"))
    caller.start()
    with pytest.raises(RuntimeError, match="the kill failed"):
        with answer_held(_Stack(ai_url), TIMED):
            raise RuntimeError("the kill failed")
    caller.join(timeout=10)
    assert not caller.is_alive()  # answered (post asserts its 201)
    assert LANES.get(f"{ai_url}/admin/hold", headers=ADMIN).json()["armed"] is False


def test_no_new_effect_in_time_is_none_and_a_replay_is_never_held(ai_url: str) -> None:
    from chaos.nemesis.provider import after_effect_timing, answer_held

    post(ai_url, "narrative-a1")
    with answer_held(_Stack(ai_url), {**TIMED, "wait_busy": 0.3}) as held:
        post(ai_url, "narrative-a1")  # the same key again: a replay answers at once, hold or not
    assert held is not None and held.effect is None and held.released_at is not None
    timing = after_effect_timing(held, time.time())
    assert timing["after_effect"] is False and timing["effect_age_at_kill"] is None, timing
    assert after_effect_timing(None, time.time()) == {}  # a kill not timed by an effect records nothing of it


def test_the_hold_needs_the_admin_token(ai_url: str) -> None:
    for method in ("GET", "POST", "DELETE"):
        assert LANES.request(method, f"{ai_url}/admin/hold").status_code == 403
        assert LANES.request(method, f"{ai_url}/admin/hold", headers={"X-Admin-Token": "wrong"}).status_code == 403
    assert LANES.get(f"{ai_url}/admin/hold", headers=ADMIN).json() == {"armed": False, "held": []}


def test_the_wait_for_a_held_answer_holds_one_client(ai_url: str, monkeypatch) -> None:
    """A client per look cost ~20 CPU ms of SSL context each, and as much delay before the kill."""
    from chaos.nemesis import provider
    from stack import loopback_http

    built, looks = [], []
    real_client = loopback_http.client

    def counted(**options):
        http = real_client(**options)
        http.event_hooks["request"].append(lambda request: looks.append(request.url))
        built.append(http)
        return http

    monkeypatch.setattr(loopback_http, "client", counted)
    with provider.answer_held(_Stack(ai_url), {**TIMED, "wait_busy": 0.3}) as held:
        assert held is not None and held.effect is None
    assert len(built) == 1 and len(looks) >= 5, (len(built), len(looks))  # arm, 3+ looks, release


def test_loopback_clients_share_one_tls_context_and_ignore_proxy_variables(monkeypatch) -> None:
    from stack import loopback_http

    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # a proxy that would refuse: never used
    with loopback_http.client() as first, loopback_http.client() as second:
        assert first._transport._pool._ssl_context is second._transport._pool._ssl_context
        assert first.trust_env is False
    assert loopback_http.default_tls() is loopback_http.default_tls()
