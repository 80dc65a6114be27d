"""Admin exports and drain, health, readiness and metrics."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from sqlalchemy import Engine
from web_support import ADMIN, LOOPBACK, TestClient, answer, auth, start, token_for

from stack.config import Settings
from stack.ledger.answer_keys import exam_key
from stack.ledger.schema import outcomes
from stack.web.app import create_admin_app, create_app

EXPORT_FIELDS = {
    "attempts": ["attempt_id", "student_id", "exam_code", "status", "started_at", "finished_at"],
    "answers": ["receipt_id", "attempt_id", "student_id", "question", "content", "idempotency_key", "node", "created_at",
                "revision"],
    "answer_revisions": ["receipt_id", "attempt_id", "question", "revision", "content", "idempotency_key", "node",
                         "created_at", "superseded"],
    "outbox": ["operation_id", "attempt_id", "kind", "status", "attempts", "job_id", "last_error",
               "created_at", "enqueued_at", "done_at", "not_before"],
    "outcomes": ["id", "operation_id", "attempt_id", "kind", "status", "payload", "created_at"],
    "exams": ["exam_code", "question_count", "answer_key"],
}
SAMPLE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[a-z_]+=\"[^\"]*\"(,[a-z_]+=\"[^\"]*\")*\})? (NaN|[-+]?[0-9.e+-]+)$")


def _run_one_attempt(client: TestClient, ledger: Engine) -> str:
    token = token_for(client, "s-7")
    attempt = start(client, token)
    answer(client, token, attempt, "q1", "B", key="k1")
    client.post(f"/v1/attempts/{attempt}/finish", headers=auth(token))
    with ledger.begin() as conn:
        conn.execute(outcomes.insert().values(operation_id=f"merit-{attempt}", attempt_id=attempt, kind="merit",
                                              status="ready", payload='{"score": 1}', created_at=1.0))
    return attempt


def test_exports_follow_the_contract(app_client: TestClient, admin_client: TestClient, ledger: Engine) -> None:
    attempt = _run_one_attempt(app_client, ledger)
    for table, fields in EXPORT_FIELDS.items():
        response = admin_client.get(f"/admin/export/{table}", headers={"X-Admin-Token": ADMIN})
        assert response.status_code == 200, table
        body = response.json()
        assert body["table"] == table and isinstance(body["exported_at"], float)
        assert body["rows"] and all(list(row) == fields for row in body["rows"]), table
    answers = admin_client.get("/admin/export/answers", headers={"X-Admin-Token": ADMIN}).json()["rows"]
    assert (answers[0]["student_id"], answers[0]["content"], answers[0]["node"]) == ("s-7", "B", "web_test")
    rows = admin_client.get("/admin/export/outcomes", headers={"X-Admin-Token": ADMIN}).json()["rows"]
    assert rows[0]["payload"] == {"score": 1} and rows[0]["attempt_id"] == attempt


def test_exams_export_publishes_each_exams_answer_key(admin_client: TestClient, ledger: Engine) -> None:
    rows = admin_client.get("/admin/export/exams", headers={"X-Admin-Token": ADMIN}).json()["rows"]
    assert [(r["exam_code"], r["question_count"], sorted(r["answer_key"])) for r in rows] == [
        ("NOVA-101", 3, ["q1", "q2", "q3"]), ("NOVA-102", 2, ["q1", "q2"])]
    with ledger.connect() as conn:
        assert all(r["answer_key"] == exam_key(conn, r["exam_code"]) for r in rows)  # the ledger's secret key


def test_exports_import_neither_rq_nor_the_job_module() -> None:
    """The answer key lives in stack.ledger.grading so that exporting it pulls in no queue code."""
    probe = "import sys, stack.ledger.exports; print(sorted(m for m in ('rq', 'stack.lanes.jobs') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_admin_needs_the_token_and_loopback(app_client: TestClient, admin_client: TestClient) -> None:
    assert admin_client.get("/admin/export/attempts").status_code == 403
    assert admin_client.get("/admin/export/attempts", headers={"X-Admin-Token": "wrong"}).status_code == 403
    assert admin_client.post("/admin/drain").status_code == 403
    public = app_client.app
    with TestClient(create_admin_app(public), client=("203.0.113.9", 4000)) as remote:  # type: ignore[arg-type]
        assert remote.get("/admin/export/attempts", headers={"X-Admin-Token": ADMIN}).status_code == 403
        assert remote.post("/admin/drain", headers={"X-Admin-Token": ADMIN}).status_code == 403
        assert remote.get("/readyz").status_code == 200
    with TestClient(create_admin_app(public), client=("::1", 4000)) as local_v6:  # type: ignore[arg-type]
        assert local_v6.get("/admin/export/attempts", headers={"X-Admin-Token": ADMIN}).status_code == 200
    assert admin_client.get("/admin/export/students", headers={"X-Admin-Token": ADMIN}).status_code == 422
    # The public listener has no admin routes at all, whatever the token and peer.
    assert app_client.get("/admin/export/attempts", headers={"X-Admin-Token": ADMIN}).status_code == 404


def test_readyz_is_503_while_draining_and_healthz_stays_up(app_client: TestClient, admin_client: TestClient) -> None:
    assert app_client.get("/readyz").status_code == 200
    drained = admin_client.post("/admin/drain", headers={"X-Admin-Token": ADMIN})
    assert drained.status_code == 200 and drained.json()["draining"] is True
    assert app_client.get("/readyz").status_code == 503
    assert app_client.get("/healthz").status_code == 200
    export = admin_client.get("/admin/export/attempts", headers={"X-Admin-Token": ADMIN})
    assert export.status_code == 200  # draining stops new routing, not service
    undrained = admin_client.post("/admin/undrain", headers={"X-Admin-Token": ADMIN})
    assert undrained.status_code == 200 and undrained.json()["draining"] is False
    assert app_client.get("/readyz").status_code == 200


def test_shutdown_marks_the_node_draining(settings: Settings, ledger: Engine) -> None:
    app = create_app(settings)
    with TestClient(app):
        assert not app.state.proctor.draining.is_set()
    assert app.state.proctor.draining.is_set()


def _parse(text: str) -> dict[str, float]:
    samples = {}
    for line in text.splitlines():
        if line.startswith("#"):
            assert re.match(r"^# (HELP|TYPE) [a-z_0-9]+ .+$", line), line
            continue
        assert SAMPLE.match(line), line
        name, value = line.rsplit(" ", 1)
        samples[name] = float(value)
    return samples


def test_metrics_need_the_admin_token(admin_client) -> None:
    """A loopback peer is no credential: another local user reaches the admin listener too."""
    assert admin_client.get("/metrics").status_code == 403
    assert admin_client.get("/metrics", headers={"X-Admin-Token": "x" * len(ADMIN)}).status_code == 403
    assert admin_client.get("/metrics", headers={"X-Admin-Token": ADMIN}).status_code == 200


def test_metrics_parse_and_report_valkey_down(app_client: TestClient, admin_client, ledger: Engine) -> None:
    _run_one_attempt(app_client, ledger)
    response = admin_client.get("/metrics", headers={"X-Admin-Token": ADMIN})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = _parse(response.text)
    assert samples['proctor_valkey_up{node="web_test"}'] == 0
    assert samples['proctor_ledger_up{node="web_test"}'] == 1
    assert samples["proctor_pending_outcomes"] == 3  # the merit outcome row alone does not finish its outbox row
    assert samples["proctor_outbox_lag_seconds"] >= 0
    assert samples['proctor_http_requests_total{node="web_test"}'] == 4  # the scrape itself counts after it replies
    assert samples['proctor_http_5xx_total{node="web_test"}'] == 0
    assert not any(name.startswith(("proctor_lane_depth", "proctor_lane_oldest")) for name in samples)  # Valkey down
    assert samples['proctor_alerts_total{kind="credit_exhausted",lane="ai"}'] == 0  # stated, not implied
    assert samples['proctor_lane_paused{lane="ai"}'] == 0


def test_an_alert_shows_on_metrics_and_the_paused_lane_too(app_client: TestClient, admin_client, ledger: Engine) -> None:
    from stack.lanes.ai import lanestate

    with ledger.begin() as conn:
        lanestate.pause(conn, "ai", "provider answered 402", actor="ai-lane")
        lanestate.raise_alert(conn, "ai", "credit_exhausted", {"status": 402})
    samples = _parse(admin_client.get("/metrics", headers={"X-Admin-Token": ADMIN}).text)
    assert samples['proctor_alerts_total{kind="credit_exhausted",lane="ai"}'] == 1
    assert samples['proctor_alerts_total{kind="credit_exhausted",lane="sms"}'] == 0
    assert (samples['proctor_lane_paused{lane="ai"}'], samples['proctor_lane_paused{lane="sms"}']) == (1, 0)


def test_metrics_count_5xx(app_client: TestClient, admin_client, ledger: Engine) -> None:
    from sqlalchemy import text

    with ledger.begin() as conn:  # break the ledger under the node: the next write is a 500
        conn.execute(text("DROP TABLE audit_log"))
    token = token_for(app_client)
    attempt = start(app_client, token)
    assert app_client.post(f"/v1/attempts/{attempt}/finish", headers=auth(token)).status_code == 500
    samples = _parse(admin_client.get("/metrics", headers={"X-Admin-Token": ADMIN}).text)
    assert samples['proctor_http_5xx_total{node="web_test"}'] == 1
    assert json.loads(app_client.get("/healthz").text)["status"] == "ok"


def test_metrics_have_a_latency_histogram_per_route_template(app_client: TestClient, admin_client, ledger: Engine) -> None:
    attempt = _run_one_attempt(app_client, ledger)
    assert app_client.get("/v1/no-such-route/8a7f").status_code == 404
    text = admin_client.get("/metrics", headers={"X-Admin-Token": ADMIN}).text
    samples = _parse(text)
    finish = 'method="POST",node="web_test",route="/v1/attempts/{attempt_id}/finish"'
    assert samples[f"proctor_http_request_duration_seconds_count{{{finish}}}"] == 1
    assert samples[f'proctor_http_request_duration_seconds_bucket{{le="+Inf",{finish}}}'] == 1
    assert 'route="unmatched"' in text  # a made-up path is one series, never its own
    assert "8a7f" not in text and str(attempt) not in text


def test_the_ai_lane_tables_are_exported_for_the_checkers(admin_client: TestClient) -> None:
    """Reservations, audit log, alerts and lane state go into every run folder (chaos/checkers/ailane.py)."""
    for table in ("ai_reservations", "audit_log", "alerts", "lane_state"):
        response = admin_client.get(f"/admin/export/{table}", headers={"X-Admin-Token": ADMIN})
        assert response.status_code == 200, table
        assert response.json()["table"] == table and isinstance(response.json()["rows"], list), table
    assert admin_client.get("/admin/export/students", headers={"X-Admin-Token": ADMIN}).status_code == 422


def test_queue_evidence_names_each_open_rows_job_state(settings: Settings, ledger: Engine, dispatcher,
                                                       valkey_server: str) -> None:
    """A finished attempt whose rows nobody enqueued (the recording dispatcher): merit awaits the
    relay, narrative and SMS wait for their merit card; once the merit job sits in its queue, it says so."""
    from redis import Redis

    from stack.lanes.enqueue import enqueue_operation
    from stack.lanes.worker import RELAY_LIVENESS, liveness_key
    from stack.ledger import outbox

    live = settings.with_overrides(valkey_url=valkey_server)
    with TestClient(create_app(live, dispatcher=dispatcher), client=LOOPBACK) as app_client, \
            TestClient(create_admin_app(app_client.app), client=LOOPBACK) as admin:  # type: ignore[arg-type]
        attempt = _run_one_attempt(app_client, ledger)
        assert admin.get("/admin/queues").status_code == 403

        def states() -> dict[str, str]:
            return {r["operation_id"]: r["state"]
                    for r in admin.get("/admin/queues", headers={"X-Admin-Token": ADMIN}).json()["rows"]}

        waiting = {f"narrative-{attempt}": "waiting", f"sms-{attempt}": "waiting"}
        assert states() == {f"merit-{attempt}": "unrelayed", **waiting}  # no relay runs here: nobody will send it
        Redis.from_url(valkey_server).set(liveness_key(RELAY_LIVENESS), "1", ex=30)
        assert states() == {f"merit-{attempt}": "awaiting_relay", **waiting}
        job = enqueue_operation(Redis.from_url(valkey_server), live, "merit", f"merit-{attempt}", 1)
        with ledger.begin() as conn:
            outbox.mark_enqueued(conn, f"merit-{attempt}", 1, job)
        body = admin.get("/admin/queues", headers={"X-Admin-Token": ADMIN}).json()
        assert body["table"] == "queues"
        [merit] = [r for r in body["rows"] if r["kind"] == "merit"]
        assert merit == {"operation_id": f"merit-{attempt}", "kind": "merit", "lane": "merit", "status": "enqueued",
                         "job_id": job, "state": "queued"}


def test_queue_evidence_with_nothing_open_asks_no_valkey(admin_client: TestClient) -> None:
    response = admin_client.get("/admin/queues", headers={"X-Admin-Token": ADMIN})
    assert response.status_code == 200 and response.json()["rows"] == []  # nothing open: Valkey not even asked


def test_queue_evidence_with_open_rows_and_valkey_away_is_a_503(app_client: TestClient, admin_client: TestClient,
                                                                ledger: Engine) -> None:
    _run_one_attempt(app_client, ledger)
    response = admin_client.get("/admin/queues", headers={"X-Admin-Token": ADMIN})
    assert response.status_code == 503 and response.headers["Retry-After"] == "1"
