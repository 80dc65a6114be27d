"""The AI narrative job under provider pressure, one run at a time, against a real SQLite
ledger, a real valkey-server and the fake AI provider (issue #11)."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
from redis import Redis

from netsupport import LANE_TOKEN, ServedApp, free_port
from stack.lanes.ai import billing, lanestate
from stack.lanes.ai.controls import BLIND_REPLAY, IGNORE_RETRY_AFTER
from stack.lanes.ai.job import LaneConfig, Step, check_startup, run_narrative
from stack.lanes.ai.limiter import CALLS_KEY, SharedLimiter
from stack.lanes.ai.review import list_review, replay, resume_lane
from stack.config import Settings, SettingsError
from stack.lanes import jobs
from stack.ledger import outbox, outcomes
from stack.ledger.engine import make_engine
from stack.ledger.schema import outbox as outbox_table
from stack.ledger.schema import outcomes as outcomes_table
from stack.providers import ai
from stack.providers.ledger import EffectLedger
from test_jobs import all_correct, provision, ready_card, seed_attempt, use
from valkeysupport import running_valkey

ADMIN = {"X-Admin-Token": "proctor-admin"}
OP = "narrative-a1"


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Redis]:
    with running_valkey(tmp_path_factory.mktemp("valkey")) as client:
        yield client


@pytest.fixture
def lane(tmp_path: Path, redis: Redis, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    redis.flushall()
    settings = Settings(run_dir=tmp_path, time_scale=0.001, ai_url=f"http://127.0.0.1:{free_port()}",
                        exams={"NOVA-101": 4}, ai_client_token=LANE_TOKEN, sms_client_token=LANE_TOKEN)
    provision(settings)
    use(settings, monkeypatch)
    with ServedApp(ai.create_app(settings), int(settings.ai_url.rsplit(":", 1)[1])):
        seed_attempt(settings, "a1", all_correct())
        ready_card(settings, "a1")
        yield settings
    jobs.reset_process_state()


def knobs(settings: Settings, **values: Any) -> None:
    assert httpx.put(f"{settings.ai_url}/admin/faults", json=values, headers=ADMIN).status_code == 200


def run(settings: Settings, redis: Redis, number: int, config: LaneConfig = LaneConfig()) -> Step:
    """Enqueue number ``number`` of the row (as the relay would) and run its job once."""
    with make_engine(settings).begin() as conn:
        assert outbox.mark_enqueued(conn, OP, number, f"{OP}-{number}")
    return run_narrative(jobs._current(), redis, OP, f"{OP}-{number}", config, random.Random(7))


def row(settings: Settings) -> dict[str, Any]:
    with make_engine(settings).begin() as conn:
        found = outbox.get_row(conn, OP)
    assert found is not None
    return found


def ledger_summary(settings: Settings) -> dict[str, Any]:
    with make_engine(settings).begin() as conn:
        return billing.summary(conn)


def effects(settings: Settings) -> list[str]:
    return [e.operation_id for e in EffectLedger(settings.run_dir / "ai_effects.db").all()]


def test_ok_call_is_reserved_completed_and_written(lane: Settings, redis: Redis) -> None:
    assert run(lane, redis, 1).action == "done"
    assert row(lane)["status"] == "done" and effects(lane) == [OP]
    assert ledger_summary(lane)["completed"] == 1 == ledger_summary(lane)["reservations"]


def slot_dated(redis: Redis, call_id: str) -> float:
    return float(redis.zscore(CALLS_KEY, call_id) or 0.0) / 1000


def test_the_slot_counts_from_the_providers_arrival_when_the_answer_says_it(lane: Settings, redis: Redis) -> None:
    knobs(lane, delay_after_effect_seconds=0.2)  # the answer comes back well after the arrival
    assert run(lane, redis, 1).action == "done"
    [effect] = EffectLedger(lane.run_dir / "ai_effects.db").all()
    assert slot_dated(redis, f"{OP}#1") == pytest.approx(effect.started_at, abs=1e-3)


def test_a_lost_answer_dates_the_slot_from_the_release(lane: Settings, redis: Redis) -> None:
    """The contrast: no answer was read, so no arrival; the slot counts from after the effect."""
    knobs(lane, delay_after_effect_seconds=0.2, lose_response_next=1)
    assert run(lane, redis, 1).action == "deferred"
    [effect] = EffectLedger(lane.run_dir / "ai_effects.db").all()
    assert slot_dated(redis, f"{OP}#1") >= effect.created_at + 0.2


def test_full_limiter_defers_the_row_with_a_not_before_and_calls_nothing(lane: Settings, redis: Redis) -> None:
    config = LaneConfig(calls_per_minute=1)
    assert config.limiter(redis, lane).acquire("someone-else").granted
    before = time.time()
    step = run(lane, redis, 1, config)
    assert (step.action, step.detail) == ("deferred", "limiter: window")
    waiting = row(lane)
    assert waiting["status"] == "pending" and waiting["not_before"] > before
    assert effects(lane) == [] and ledger_summary(lane)["reservations"] == 0
    with make_engine(lane).begin() as conn:  # the relay will not take it before its time
        assert OP not in [r["operation_id"] for r in outbox.enqueueable(conn)]


def test_429_releases_the_reservation_pauses_every_worker_and_waits_past_retry_after(
    lane: Settings, redis: Redis
) -> None:
    knobs(lane, status=429, retry_after_seconds=5.0)  # the first backoff is at most 0.06 s at this scale
    before = time.time()
    step = run(lane, redis, 1)
    assert step.action == "deferred" and "transient 429" in step.detail
    assert row(lane)["not_before"] >= before + 5.0
    assert ledger_summary(lane) == {**ledger_summary(lane), "reservations": 1, "released": 1, "pending": 0}
    paused = LaneConfig().limiter(redis, lane).acquire("another-worker")
    assert (paused.granted, paused.reason) == (False, "paused")


def test_negative_control_ignoring_retry_after_retries_on_backoff_alone(lane: Settings, redis: Redis) -> None:
    knobs(lane, status=429, retry_after_seconds=5.0)
    before = time.time()
    step = run(lane, redis, 1, LaneConfig(retry_after=IGNORE_RETRY_AFTER))
    assert step.action == "deferred"
    assert row(lane)["not_before"] < before + 5.0  # the backoff alone: far earlier than the provider asked
    assert LaneConfig().limiter(redis, lane).acquire("another-worker").granted  # nobody else was paused


def test_the_lane_config_follows_the_start_up_switches(lane: Settings) -> None:
    assert LaneConfig.from_settings(lane) == LaneConfig()
    blind = LaneConfig.from_settings(lane.with_overrides(ai_shared_limiter=False, ai_retry_after=False,
                                                         ai_ask_before_replay=False, component="worker_ai_2"))
    assert blind.limiter_keys == ("proctor:ai:calls:worker_ai_2", "proctor:ai:pause:worker_ai_2")
    assert (blind.retry_after, blind.replay) == (IGNORE_RETRY_AFTER, BLIND_REPLAY)


def test_credit_exhausted_pauses_the_lane_alerts_and_resume_releases_the_row(lane: Settings, redis: Redis) -> None:
    knobs(lane, credit_balance=0.0)
    assert run(lane, redis, 1).action == "held"
    with make_engine(lane).begin() as conn:
        assert lanestate.is_paused(conn, "ai")
        assert [a["kind"] for a in lanestate.list_alerts(conn)] == ["credit_exhausted"]
        assert OP not in [r["operation_id"] for r in outbox.enqueueable(conn)]  # paused: no more calls
        assert resume_lane(conn, "ai", "operator", lane.time_scale) == {"lane": "ai", "resumed": True, "to_review": []}
        assert OP in [r["operation_id"] for r in outbox.enqueueable(conn)]
    assert ledger_summary(lane)["released"] == 1 and effects(lane) == []


def test_resume_sends_rows_past_their_deadline_to_review_first(lane: Settings, redis: Redis) -> None:
    knobs(lane, key_revoked=True)
    assert run(lane, redis, 1).detail == "key_revoked"
    with make_engine(lane).begin() as conn:
        resumed = resume_lane(conn, "ai", "operator", lane.time_scale, now=time.time() + 12 * 3600 * 0.001 + 1)
        assert resumed["to_review"] == [OP]
        assert [item["operation_id"] for item in list_review(conn)] == [OP]


def test_lost_response_is_reconciled_by_operation_id_not_replayed(lane: Settings, redis: Redis) -> None:
    knobs(lane, lose_response_next=1)
    step = run(lane, redis, 1)
    assert step.action == "deferred" and "unknown outcome" in step.detail
    assert ledger_summary(lane)["pending"] == 1
    assert run(lane, redis, 2).detail == "reconciled: the provider had done it"
    assert effects(lane) == [OP] and row(lane)["status"] == "done"
    assert ledger_summary(lane) == {**ledger_summary(lane), "reservations": 1, "completed": 1, "pending": 0}


def _earlier_call_pending(settings: Settings) -> None:
    """A run whose call the provider has not recorded (yet): its reservation is pending."""
    with make_engine(settings).begin() as conn:
        billing.reserve(conn, OP, 1, 1.0)


def _late_effect(settings: Settings) -> httpx.Response:
    """The earlier call lands at the provider after all (it kept working when its caller died)."""
    return httpx.post(f"{settings.ai_url}/v1/narratives", headers={"Idempotency-Key": OP, "Authorization": f"Bearer {LANE_TOKEN}"},
                      json={"operation_id": OP, "attempt_id": "a1", "score": 4, "position": 1})


def _billing_verdict(settings: Settings) -> Any:
    from chaos.checkers.billing import check_billing
    from chaos.ledgers import EffectRow

    with make_engine(settings).begin() as conn:
        reservations = billing.rows(conn)
    charged = [EffectRow(operation_id=e.operation_id) for e in EffectLedger(settings.run_dir / "ai_effects.db").all()]
    return check_billing(reservations, charged)


def test_a_404_look_up_does_not_release_a_call_that_may_still_land(lane: Settings, redis: Redis) -> None:
    """Part 1 released on the 404; a refused retry, then the earlier call landing, was released_but_charged."""
    _earlier_call_pending(lane)
    knobs(lane, status=429, retry_after_seconds=0.01)
    assert run(lane, redis, 2).action == "deferred"  # looked up (404), called again, refused
    with make_engine(lane).begin() as conn:
        assert [(r["call_id"], r["state"]) for r in billing.rows(conn)] == [(f"{OP}#1", "pending"), (f"{OP}#2", "released")]
    assert _late_effect(lane).status_code == 429  # still refused while the knob holds
    knobs(lane)
    assert _late_effect(lane).status_code == 201  # now the earlier call lands
    verdict = _billing_verdict(lane)
    assert verdict.valid is True, verdict.to_dict()  # covered by the pending reservation


def test_the_next_answer_under_the_key_settles_the_earlier_reservation(lane: Settings, redis: Redis,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    _earlier_call_pending(lane)
    assert run(lane, redis, 2).action == "done"  # 404, then a fresh effect: the earlier call never took effect
    with make_engine(lane).begin() as conn:
        assert [r["state"] for r in billing.rows(conn)] == ["released", "completed"]
    assert _billing_verdict(lane).valid is True and effects(lane) == [OP]


def test_a_replayed_answer_completes_the_earlier_reservation_not_the_new_one(lane: Settings, redis: Redis,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    _earlier_call_pending(lane)
    assert _late_effect(lane).status_code == 201  # the earlier call lands between the look-up and the retry
    monkeypatch.setattr(jobs, "_recorded_response", lambda *_args: None)  # the look-up came just before it
    assert run(lane, redis, 2).action == "done"
    with make_engine(lane).begin() as conn:
        assert [(r["call_id"], r["state"]) for r in billing.rows(conn)] == [(f"{OP}#1", "completed"), (f"{OP}#2", "released")]
    assert _billing_verdict(lane).valid is True and effects(lane) == [OP]


def test_a_run_again_after_a_completed_call_releases_its_replayed_reservation(lane: Settings, redis: Redis) -> None:
    """The CI rehearsal of 30 November: a worker killed after the provider answered and the
    reservation completed, before the outcome was written; the job ran again, the provider
    replayed under the key, and the new reservation was completed too (completed_without_charge)."""
    assert run(lane, redis, 1).action == "done"  # call 1 answered and its reservation completed
    with make_engine(lane).begin() as conn:  # as if the worker died before writing the outcome
        conn.execute(outcomes_table.delete().where(outcomes_table.c.operation_id == OP))
        conn.execute(outbox_table.update().where(outbox_table.c.operation_id == OP).values(status="pending"))
    time.sleep(0.2)  # past the shared limiter's window for the one call
    assert run(lane, redis, 2).action == "done"
    with make_engine(lane).begin() as conn:
        assert [(r["call_id"], r["state"]) for r in billing.rows(conn)] == [(f"{OP}#1", "completed"), (f"{OP}#2", "released")]
    verdict = _billing_verdict(lane)
    assert verdict.valid is True, verdict.to_dict()
    assert effects(lane) == [OP]


def test_negative_control_replay_without_asking_charges_twice(lane: Settings, redis: Redis) -> None:
    blind = LaneConfig(replay=BLIND_REPLAY)
    knobs(lane, lose_response_next=1)
    assert run(lane, redis, 1, blind).action == "deferred"
    time.sleep(0.2)  # past the shared limiter's window for this one call
    assert run(lane, redis, 2, blind).action == "done"
    assert effects(lane) == [OP, OP]  # the duplicate charge the checker must catch


def test_invalid_payload_goes_to_review_and_one_replay_runs_it_once(lane: Settings, redis: Redis) -> None:
    knobs(lane, invalid_operations=[OP])
    assert run(lane, redis, 1).action == "review"
    with make_engine(lane).begin() as conn:
        [item] = list_review(conn)
        assert item["record"]["permanent"] is True and item["record"]["reservations"][0]["state"] == "released"
        replay(conn, OP, "operator")
    knobs(lane)
    time.sleep(0.2)
    assert run(lane, redis, 2).action == "done"
    assert effects(lane) == [OP]
    with make_engine(lane).begin() as conn:
        assert [o["status"] for o in outcomes.find(conn, OP)] == ["failed_for_review", "ready"]


def test_a_failed_review_replay_goes_back_to_review_without_retrying(lane: Settings, redis: Redis) -> None:
    knobs(lane, invalid_operations=[OP])
    run(lane, redis, 1)
    knobs(lane, status=503)
    with make_engine(lane).begin() as conn:
        replay(conn, OP, "operator")
    step = run(lane, redis, 2)
    assert step.action == "review" and "review replay failed" in step.detail


def test_past_the_deadline_the_job_sends_the_row_to_review_without_calling(lane: Settings, redis: Redis) -> None:
    with make_engine(lane).begin() as conn:
        conn.execute(outbox_table.update().where(outbox_table.c.operation_id == OP)
                     .values(created_at=time.time() - 12 * 3600 * 0.001 - 1))
    assert run(lane, redis, 1).detail == "retry deadline reached"
    assert effects(lane) == [] and row(lane)["status"] == "failed"


def test_limiter_lease_outlasts_the_job_timeout(lane: Settings, redis: Redis) -> None:
    limiter = LaneConfig().limiter(redis, lane)
    assert isinstance(limiter, SharedLimiter) and limiter.lease_ms / 1000 > jobs.job_timeout("narrative", lane)
    check_startup(lane, LaneConfig())  # the defaults pass


@pytest.mark.parametrize("field", ["lease_seconds", "visibility_timeout_seconds"])
def test_startup_check_refuses_a_job_timeout_that_outlives_lease_or_visibility(lane: Settings, field: str) -> None:
    with pytest.raises(SettingsError, match=field):
        check_startup(lane, LaneConfig(**{field: 1.0}))


def test_a_valkey_flush_during_backoff_loses_nothing(lane: Settings, redis: Redis) -> None:
    """The wait lives in the outbox row: with Valkey emptied, the relay still sends it when due."""
    from stack.relay import Relay

    knobs(lane, status=503)
    assert run(lane, redis, 1).action == "deferred"
    assert row(lane)["not_before"] > row(lane)["created_at"]  # the lane wrote its wait into the row
    # At TIME_SCALE 0.001 that wait is milliseconds, shorter than one pass on a busy machine (a CI
    # rehearsal's pass began before it and read the clock after it): hold the row 0.5 s longer, so
    # passes that end before it are certain to run, and judge only those.
    not_before = time.time() + 0.5
    with make_engine(lane).begin() as conn:
        conn.execute(outbox_table.update().where(outbox_table.c.operation_id == OP).values(not_before=not_before))
    redis.flushall()
    relay = Relay(lane.with_overrides(valkey_url="redis://unused"), make_engine(lane), redis)
    early = 0
    while True:  # not before its time...
        report = relay.run_once()
        if time.time() >= not_before:
            break
        assert OP not in report.enqueued
        early += 1
        time.sleep(0.01)
    assert early >= 1  # at least one whole pass ran before the row was due
    if OP not in report.enqueued:  # the last pass may have read the clock just before the row was due
        report = relay.run_once()
    assert OP in report.enqueued  # ...and then, from the ledger alone
    assert row(lane)["job_id"] == f"{OP}-2" and redis.exists(f"rq:job:{OP}-2")


def test_a_real_rq_worker_runs_the_lane_job_from_the_relay(lane: Settings, redis: Redis) -> None:
    """End to end on the real path: relay -> Valkey -> `python -m stack.lanes.worker ai` -> provider."""
    from stack.relay import Relay
    from test_relay import start_worker, worker_log

    port = redis.connection_pool.connection_kwargs["port"]
    settings = lane.with_overrides(valkey_url=f"redis://127.0.0.1:{port}/0")
    assert OP in Relay(settings, make_engine(settings), redis).run_once().enqueued
    worker = start_worker(settings, "ai", "--burst")
    assert worker.wait(timeout=120) == 0, worker_log(settings, "ai")
    assert row(lane)["status"] == "done" and effects(lane) == [OP]
    assert ledger_summary(lane)["completed"] == 1


@pytest.mark.parametrize("header", [None, "", "soon", "nan", "inf"])
def test_an_absent_or_unreadable_arrival_header_falls_back_to_the_release(header: str | None) -> None:
    from stack.lanes.ai.job import _received_at

    assert _received_at(header) is None
    assert _received_at("1764510000.250000") == 1764510000.25  # the contrast: a readable one is taken
