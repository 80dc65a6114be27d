"""Job functions against a real SQLite ledger and real fake providers (uvicorn threads).

Jobs read their settings from the environment, as they do in a worker's horse.
The unknown-outcome case runs the job in a subprocess and kills it after the
gateway recorded the effect but before it answered.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from netsupport import LANE_TOKEN, REPO, ServedApp, free_port
from stack.config import Settings
from stack.lanes import jobs
from stack.ledger import outbox, outcomes
from stack.ledger.engine import init_ledger, make_engine
from stack.ledger.answer_keys import exam_key
from stack.ledger.schema import answers, attempts, students
from stack.ledger.schema import outcomes as outcome_rows
from stack.providers import ai, sms
from stack.providers.ledger import EffectLedger

ADMIN = {"X-Admin-Token": "proctor-admin"}




@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    current = Settings(
        run_dir=tmp_path,
        time_scale=0.001,
        ai_url=f"http://127.0.0.1:{free_port()}",
        sms_url=f"http://127.0.0.1:{free_port()}",
        exams={"NOVA-101": 4},
        ai_client_token=LANE_TOKEN,
        sms_client_token=LANE_TOKEN,
    )
    provision(current)
    yield current
    jobs.reset_process_state()


def use(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """Put settings where jobs read them: the environment."""
    for name, value in settings.to_env().items():
        monkeypatch.setenv(name, value)
    jobs.reset_process_state()


@pytest.fixture
def providers(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    use(settings, monkeypatch)
    with ServedApp(ai.create_app(settings), int(settings.ai_url.rsplit(":", 1)[1])):
        with ServedApp(sms.create_app(settings), int(settings.sms_url.rsplit(":", 1)[1])):
            yield settings


def seed_attempt(settings: Settings, attempt_id: str, contents: dict[str, str], status: str = "finished") -> None:
    """An attempt with its answers and, once finished, its three pending outbox rows."""
    now = time.time()
    with make_engine(settings).begin() as conn:
        conn.execute(students.insert().prefix_with("OR IGNORE").values(id="s-" + attempt_id, created_at=now))
        conn.execute(
            attempts.insert().values(
                id=attempt_id, student_id="s-" + attempt_id, exam_code="NOVA-101", status=status, started_at=now,
                finished_at=now if status == "finished" else None,
            )
        )
        for question, content in contents.items():
            conn.execute(
                answers.insert().values(
                    receipt_id=f"r-{attempt_id}-{question}", attempt_id=attempt_id, question=question, content=content,
                    idempotency_key=f"k-{attempt_id}-{question}", body_sha256="0" * 64, node="web_1", created_at=now,
                )
            )
        if status == "finished":
            outbox.create_rows(conn, attempt_id, now)


KEY: dict[str, str] = {}
"""The answer key of the current test's ledger (the settings fixture reads it)."""


def provision(settings: Settings) -> None:
    """Create the ledger and remember its answer key: drawn at provisioning, secret, so read back here."""
    engine = make_engine(settings)
    init_ledger(engine, settings)
    with engine.connect() as conn:
        KEY.clear()
        KEY.update(exam_key(conn, "NOVA-101"))
    engine.dispose()


def all_correct() -> dict[str, str]:
    return dict(KEY)


def all_wrong() -> dict[str, str]:
    return {q: next(o for o in jobs.OPTIONS if o != right) for q, right in all_correct().items()}


def ledger_state(settings: Settings, op: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    with make_engine(settings).begin() as conn:
        row = outbox.get_row(conn, op)
        assert row is not None
        return outcomes.find(conn, op), row


def gateway_effects(settings: Settings, provider: str, op: str) -> int:
    return len(EffectLedger(settings.run_dir / f"{provider}_effects.db").for_operation(op))


def test_the_ledger_holds_one_option_per_question(settings: Settings) -> None:
    assert sorted(KEY) == ["q1", "q2", "q3", "q4"] and set(KEY.values()) <= set(jobs.OPTIONS)


def test_merit_twice_writes_one_outcome_and_marks_done(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    use(settings, monkeypatch)
    seed_attempt(settings, "a1", all_correct())
    first = jobs.compute_merit_card("merit-a1")
    second = jobs.compute_merit_card("merit-a1")
    rows, row = ledger_state(settings, "merit-a1")
    assert [r["status"] for r in rows] == ["ready"]
    assert rows[0]["payload"]["score"] == 4 and rows[0]["payload"]["max_score"] == 4
    assert first["payload"]["score"] == 4 and second == {"operation_id": "merit-a1", "status": "ready", "replayed": True}
    assert row["status"] == "done" and row["done_at"] is not None


def test_merit_position_ranks_among_finished_attempts(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    use(settings, monkeypatch)
    seed_attempt(settings, "best", all_correct())
    seed_attempt(settings, "worst", all_wrong())
    assert jobs.compute_merit_card("merit-worst")["payload"]["position"] == 2
    card = jobs.compute_merit_card("merit-best")["payload"]
    assert (card["score"], card["position"], card["finished_attempts"]) == (4, 1, 2)


def test_merit_card_records_the_set_it_was_ranked_against(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ties share a position; an open attempt is not ranked; the set is what the position counts."""
    use(settings, monkeypatch)
    seed_attempt(settings, "c-tie", all_correct())
    seed_attempt(settings, "b-tie", all_correct())
    seed_attempt(settings, "a-low", {**all_correct(), "q1": "  " + all_wrong()["q1"].lower()})
    seed_attempt(settings, "open", all_correct(), status="open")
    card = jobs.compute_merit_card("merit-a-low")["payload"]
    assert set(card) == {"attempt_id", "student_id", "exam_code", "score", "max_score", "position",
                         "ranked_against", "finished_attempts", "computed_at"}
    assert (card["score"], card["max_score"], card["position"]) == (3, 4, 3)
    assert card["ranked_against"] == ["a-low", "b-tie", "c-tie"] and card["finished_attempts"] == 3
    tie = jobs.compute_merit_card("merit-c-tie")["payload"]
    assert (tie["score"], tie["position"], tie["ranked_against"]) == (4, 1, ["a-low", "b-tie", "c-tie"])


def test_answers_are_scored_case_and_blank_insensitively(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    use(settings, monkeypatch)
    seed_attempt(settings, "a1", {q: f" {right.lower()}\n" for q, right in all_correct().items()})
    assert jobs.compute_merit_card("merit-a1")["payload"]["score"] == 4


def test_concurrent_merit_runs_write_once(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    use(settings, monkeypatch)
    seed_attempt(settings, "a1", all_correct())
    threads = [threading.Thread(target=jobs.compute_merit_card, args=("merit-a1",)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    rows, _ = ledger_state(settings, "merit-a1")
    assert len(rows) == 1


def ready_card(settings: Settings, attempt_id: str, **fields: Any) -> dict[str, Any]:
    """Compute the attempt's merit card (as its merit job would), optionally overriding fields."""
    card = jobs.compute_merit_card(f"merit-{attempt_id}")["payload"]
    if fields:
        with make_engine(settings).begin() as conn:
            conn.execute(outcome_rows.update().where(outcome_rows.c.operation_id == f"merit-{attempt_id}")
                         .values(payload=json.dumps({**card, **fields})))
    return {**card, **fields}


def run_killed_after_effect(settings: Settings, op: str) -> None:
    """Run the sms job in a child; kill it once the gateway recorded the effect, before it answered."""
    httpx.put(f"{settings.sms_url}/admin/faults", json={"delay_after_effect_seconds": 3}, headers=ADMIN)
    env = {**os.environ, **settings.to_env(), "PYTHONPATH": str(REPO)}
    code = f"from stack.lanes.jobs import send_result_sms; send_result_sms({op!r})"
    child = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=REPO)
    try:
        deadline = time.monotonic() + 15
        while gateway_effects(settings, "sms", op) == 0:
            assert time.monotonic() < deadline and child.poll() is None, "the gateway never saw the call"
            time.sleep(0.02)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    httpx.delete(f"{settings.sms_url}/admin/faults", headers=ADMIN)


@pytest.mark.parametrize("idempotency, expected_effects", [(True, 1), (False, 2)])
def test_sms_rerun_after_unknown_outcome(
    providers: Settings, monkeypatch: pytest.MonkeyPatch, idempotency: bool, expected_effects: int
) -> None:
    current = providers.with_overrides(sms_idempotency=idempotency)
    use(current, monkeypatch)
    seed_attempt(current, "a1", all_correct())
    ready_card(current, "a1")
    run_killed_after_effect(current, "sms-a1")
    rows, _ = ledger_state(current, "sms-a1")
    assert rows == []  # the worker died before it could record the send
    jobs.send_result_sms("sms-a1")  # the re-run the reconciler would start
    jobs.send_result_sms("sms-a1")  # and a duplicate delivery of it: ready outcome -> no call
    rows, row = ledger_state(current, "sms-a1")
    assert len(rows) == 1 and row["status"] == "done"
    assert gateway_effects(current, "sms", "sms-a1") == expected_effects


@pytest.mark.parametrize("kind, provider, path", [("sms", "sms", "/v1/messages")])  # narrative: stack/lanes/ai (409 -> review)
def test_rerun_whose_request_changed_reconciles_with_what_the_provider_did(
    providers: Settings, monkeypatch: pytest.MonkeyPatch, kind: str, provider: str, path: str
) -> None:
    """The provider already holds another body under the operation's key (a run of an older
    release, whose position moved before the card was write-once). The re-run must take the
    recorded effect (reconcile before replay), not fail the job or charge twice."""
    use(providers, monkeypatch)
    seed_attempt(providers, "a1", all_correct())
    ready_card(providers, "a1")
    op = f"{kind}-a1"
    first_body = ({"operation_id": op, "attempt_id": "a1", "score": 4, "position": 7} if kind == "narrative"
                  else {"operation_id": op, "to": "student:s-a1", "body": "NOVA-101: position 7."})
    base = providers.ai_url if provider == "ai" else providers.sms_url
    first = httpx.post(f"{base}{path}", json=first_body, headers={"Idempotency-Key": op, "Authorization": f"Bearer {LANE_TOKEN}"})
    assert first.status_code == 201, first.text
    jobs.send_result_sms(op)
    rows, row = ledger_state(providers, op)
    assert len(rows) == 1 and rows[0]["status"] == "ready" and row["status"] == "done"
    assert gateway_effects(providers, provider, op) == 1
    recorded = rows[0]["payload"]
    assert ("placed #7" in recorded["text"]) if kind == "narrative" else (recorded["body"] == first_body["body"])


def test_sms_carries_the_cards_position_and_records_what_was_sent(providers: Settings) -> None:
    """The card says position 5004 while a fresh ranking would say 1: the job must say 5004.
    (The narrative job, stack/lanes/ai/job.py, is held to the same by the payloads checker.)"""
    seed_attempt(providers, "a1", all_correct())
    ready_card(providers, "a1", position=5004)
    jobs.send_result_sms("sms-a1")
    sms_rows, _ = ledger_state(providers, "sms-a1")
    sent = EffectLedger(providers.run_dir / "sms_effects.db").for_operation("sms-a1")[0]
    assert sms_rows[0]["payload"] == {
        "message_id": sent.response["message_id"], "to": "student:s-a1", "body": "NOVA-101: you scored 4/4, position 5004."
    }


@pytest.mark.parametrize("kind, provider", [("sms", "sms")])
def test_jobs_never_compute_a_position_of_their_own(providers: Settings, kind: str, provider: str) -> None:
    """Without a ready card the job fails loudly: no provider call, no outcome, the row untouched."""
    seed_attempt(providers, "a1", all_correct())
    run = jobs.send_result_sms
    with pytest.raises(LookupError, match="merit card of attempt a1 is not ready"):  # jobs.MeritCardNotReady
        run(f"{kind}-a1")
    rows, row = ledger_state(providers, f"{kind}-a1")
    assert rows == [] and row["status"] == "pending"
    assert gateway_effects(providers, provider, f"{kind}-a1") == 0


# -- the SMS lane's refusal classes (stack/lanes/sms_refusals.py, issue #11) -----------------------

def sms_job_running(settings: Settings, monkeypatch: pytest.MonkeyPatch, op: str = "sms-a1") -> None:
    """The relay enqueued the row as its next job, <op>-<attempts + 1>, and the job runs as that RQ job."""
    from stack.lanes import sms_refusals

    with make_engine(settings).begin() as conn:
        number = outbox.get_row(conn, op)["attempts"] + 1
        assert outbox.mark_enqueued(conn, op, number, f"{op}-{number}")
    monkeypatch.setattr(sms_refusals, "_current_job_id", lambda: f"{op}-{number}")


def test_sms_429_hands_the_row_back_until_retry_after_without_a_send(providers: Settings,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    seed_attempt(providers, "a1", all_correct())
    ready_card(providers, "a1")
    sms_job_running(providers, monkeypatch)
    httpx.put(f"{providers.sms_url}/admin/faults", json={"status": 429, "retry_after_seconds": 5.0}, headers=ADMIN)
    before = time.time()
    assert jobs.send_result_sms("sms-a1")["status"] == "transient"
    rows, row = ledger_state(providers, "sms-a1")
    assert rows == [] and row["status"] == "pending" and row["not_before"] >= before + 5.0
    assert row["deferrals"] == 1 and gateway_effects(providers, "sms", "sms-a1") == 0


def test_sms_402_pauses_the_lane_alerts_and_holds_every_sms_until_resumed(providers: Settings,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from stack.lanes.ai import lanestate

    seed_attempt(providers, "a1", all_correct())
    ready_card(providers, "a1")
    sms_job_running(providers, monkeypatch)
    httpx.put(f"{providers.sms_url}/admin/faults", json={"credit_balance": 0.0}, headers=ADMIN)
    assert jobs.send_result_sms("sms-a1")["status"] == "halt"
    with make_engine(providers).begin() as conn:
        assert lanestate.is_paused(conn, "sms") and not lanestate.is_paused(conn, "ai")
        assert [(a["lane"], a["kind"]) for a in lanestate.list_alerts(conn)] == [("sms", "credit_exhausted")]
        assert "sms-a1" not in [r["operation_id"] for r in outbox.enqueueable(conn)]  # the relay holds it
    httpx.delete(f"{providers.sms_url}/admin/faults", headers=ADMIN)  # credit restored, lane still paused
    sms_job_running(providers, monkeypatch)
    assert jobs.send_result_sms("sms-a1")["status"] == "held"  # a job queued before the pause sends nothing
    assert gateway_effects(providers, "sms", "sms-a1") == 0
    with make_engine(providers).begin() as conn:
        lanestate.resume(conn, "sms", actor="operator")
        assert "sms-a1" in [r["operation_id"] for r in outbox.enqueueable(conn)]


def test_sms_422_goes_to_review_at_once(providers: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    seed_attempt(providers, "a1", all_correct())
    ready_card(providers, "a1")
    sms_job_running(providers, monkeypatch)
    httpx.put(f"{providers.sms_url}/admin/faults", json={"invalid_operations": ["sms-a1"]}, headers=ADMIN)
    assert jobs.send_result_sms("sms-a1")["status"] == "permanent"
    rows, row = ledger_state(providers, "sms-a1")
    assert row["status"] == "failed" and [r["status"] for r in rows] == ["failed_for_review"]
