"""The AI lane's operator routes on a node's admin listener, driven by the `proctor lane |
review | alerts | audit` commands over real HTTP (issue #11)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from sqlalchemy import Engine
from web_support import ADMIN, ROSTER_KEY, TestClient, closed_port

from chaos.cli import ai_lane as ops_cmd

from netsupport import LANE_TOKEN, ServedApp, lane_client, free_port
from stack.lanes.ai import billing, lanestate
from stack.config import Settings
from stack.ledger import outbox, outcomes
from stack.ledger.schema import attempts, outbox as outbox_table, students
from stack.providers import ai
from stack.web.app import create_admin_app

OP = "narrative-a1"


LANES = lane_client()  # calls as the lanes make them: with their per-run bearer token

@pytest.fixture
def settings(tmp_path: Path) -> Settings:  # as web_fixtures' settings, plus a real fake AI provider's address
    return Settings(run_dir=tmp_path, valkey_url=f"redis://127.0.0.1:{closed_port()}/0", exams={"NOVA-101": 3},
                    token_secret="test-secret", admin_token=ADMIN, roster_key=ROSTER_KEY, node_name="web_test",
                    ai_url=f"http://127.0.0.1:{free_port()}", ai_client_token=LANE_TOKEN, sms_client_token=LANE_TOKEN)


@pytest.fixture
def admin_url(settings: Settings, app_client: TestClient) -> Iterator[str]:
    provider_settings = settings.with_overrides(run_dir=settings.run_dir / "provider", time_scale=0.001)
    with ServedApp(ai.create_app(provider_settings), int(settings.ai_url.rsplit(":", 1)[1])):
        with ServedApp(create_admin_app(app_client.app)) as served:  # type: ignore[arg-type]
            yield served.url


def command(main: Any, *argv: str, url: str) -> tuple[int, Any]:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([*argv, "--url", url, "--token", ADMIN, "--json"])
    return code, json.loads(out.getvalue()) if out.getvalue() else None


def human(main: Any, *argv: str, url: str) -> tuple[int, str]:
    """The same command as people see it: stack/cli_output.py's table."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([*argv, "--url", url, "--token", ADMIN])
    return code, out.getvalue()


def seed_review_item(ledger: Engine) -> None:
    now = time.time()
    with ledger.begin() as conn:
        conn.execute(students.insert().values(id="s-a1", created_at=now))
        conn.execute(attempts.insert().values(id="a1", student_id="s-a1", exam_code="NOVA-101", status="finished",
                                              started_at=now, finished_at=now))
        outbox.create_rows(conn, "a1", now)
        conn.execute(outbox_table.update().where(outbox_table.c.operation_id == OP)
                     .values(status="failed", last_error="retry deadline reached"))
        outcomes.write_failed_for_review(conn, OP, "a1", "narrative", {"reason": "retry deadline reached"})


def test_lane_pause_and_resume_over_http_are_audited(admin_url: str, ledger: Engine) -> None:
    assert command(ops_cmd.lane_main, "pause", "ai", "--reason", "invoice overdue", url=admin_url)[1]["paused"] is True
    assert command(ops_cmd.lane_main, "show", "ai", url=admin_url)[1]["reason"] == "invoice overdue"
    code, resumed = command(ops_cmd.lane_main, "resume", "ai", url=admin_url)
    assert (code, resumed) == (0, {"lane": "ai", "resumed": True, "to_review": []})
    with ledger.begin() as conn:
        assert not lanestate.is_paused(conn, "ai")


def test_review_list_and_replay_once(admin_url: str, ledger: Engine) -> None:
    seed_review_item(ledger)
    code, listed = command(ops_cmd.review_main, "list", url=admin_url)
    assert code == 0 and [(i["operation_id"], i["record"]["reason"]) for i in listed["items"]] == [
        (OP, "retry deadline reached")]
    assert command(ops_cmd.review_main, "replay", OP, url=admin_url)[0] == 0
    with ledger.begin() as conn:
        assert outbox.get_row(conn, OP)["status"] == "pending"  # type: ignore[index]
    assert command(ops_cmd.review_main, "replay", OP, url=admin_url)[0] == 2  # not in review any more: refused
    assert command(ops_cmd.review_main, "list", url=admin_url)[1] == {"items": []}


def test_people_get_tables_with_iso_times_and_empty_results_say_so(admin_url: str, ledger: Engine) -> None:
    assert human(ops_cmd.review_main, "list", url=admin_url) == (0, "the review queue is empty\n")
    assert human(ops_cmd.alerts_main, url=admin_url) == (0, "no alerts\n")
    seed_review_item(ledger)
    code, text = human(ops_cmd.review_main, "list", url=admin_url)
    header, row = text.splitlines()
    assert code == 0 and header.split()[:3] == ["operation", "attempt", "accepted"] and OP in row
    assert re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", row), row  # ISO 8601, not epoch seconds
    with ledger.begin() as conn:
        lanestate.raise_alert(conn, "ai", "credit_exhausted", {"status": 402})
    code, text = human(ops_cmd.alerts_main, url=admin_url)
    assert "credit_exhausted" in text and re.search(r"\dT\d", text) and not text.lstrip().startswith("{")
    assert human(ops_cmd.lane_main, "pause", "ai", url=admin_url)[1].startswith("lane ai: PAUSED since 20")
    assert human(ops_cmd.lane_main, "resume", "ai", url=admin_url)[1] == "lane ai: resumed\n"


def test_alerts_list_what_the_lane_raised(admin_url: str, ledger: Engine) -> None:
    with ledger.begin() as conn:
        lanestate.raise_alert(conn, "ai", "credit_exhausted", {"status": 402})
    code, shown = command(ops_cmd.alerts_main, url=admin_url)
    assert code == 0 and [(a["kind"], a["detail"]) for a in shown["alerts"]] == [("credit_exhausted", {"status": 402})]


def test_audit_billing_passes_then_fails_on_a_charge_nobody_reserved(admin_url: str, ledger: Engine,
                                                                     settings: Settings) -> None:
    body = {"operation_id": OP, "attempt_id": "a1", "score": 1, "position": 1}
    assert LANES.post(f"{settings.ai_url}/v1/narratives", json=body).status_code == 201
    with ledger.begin() as conn:
        billing.complete(conn, billing.reserve(conn, OP, 1, 1.0))
    code, shown = command(ops_cmd.audit_main, "billing", url=admin_url)
    assert code == 0 and shown["verdict"]["valid"] is True and shown["summary"]["completed"] == 1
    other = {**body, "operation_id": "narrative-a2"}
    assert LANES.post(f"{settings.ai_url}/v1/narratives", json=other).status_code == 201
    code, shown = command(ops_cmd.audit_main, "billing", url=admin_url)
    assert code == 1 and shown["verdict"]["violations"] == ["unreserved_charge"]


def test_audit_billing_reads_reservations_around_the_invoice_like_the_run_checker(
    admin_url: str, ledger: Engine, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lane call lands while the invoice is read: reserved before it was charged, so the later
    read covers it. The negative control judges the earlier read alone and sees an unreserved charge."""
    from chaos.checkers.billing import check_billing
    from chaos.ledgers import EffectRow
    from stack.web.routes import lanes as routes_ailane

    read_invoice, calls = routes_ailane._provider_effects, iter(range(1, 10))

    def lane_calls_during_the_read(state: Any) -> list[dict[str, Any]]:
        op = f"narrative-r{next(calls)}"
        with ledger.begin() as conn:
            call_id = billing.reserve(conn, op, 1, 1.0)
        body = {"operation_id": op, "attempt_id": "a1", "score": 1, "position": 1}
        assert LANES.post(f"{settings.ai_url}/v1/narratives", json=body).status_code == 201
        effects = read_invoice(state)
        with ledger.begin() as conn:
            billing.complete(conn, call_id)
        return effects

    monkeypatch.setattr(routes_ailane, "_provider_effects", lane_calls_during_the_read)
    code, shown = command(ops_cmd.audit_main, "billing", url=admin_url)
    assert code == 0 and shown["verdict"]["valid"] is True and shown["summary"]["completed"] == 1
    data = LANES.get(f"{admin_url}/admin/audit/billing", headers={"X-Admin-Token": ADMIN}).json()
    effects = [EffectRow(**effect) for effect in data["provider_effects"]]
    assert check_billing(data["reservations"], effects, data["reservations_after"]).valid is True
    single_read = check_billing(data["reservations"], effects)  # the command before: one read, before the invoice
    assert single_read.valid is False and single_read.violations == ["unreserved_charge"]


def test_commands_name_what_is_missing(capsys: pytest.CaptureFixture[str]) -> None:
    assert ops_cmd.alerts_main(["--token", ADMIN, "--url", ""]) == 2
    assert "--url" in capsys.readouterr().err
    assert ops_cmd.review_main(["replay", "--url", "http://127.0.0.1:1", "--token", ADMIN]) == 2
    assert "OPERATION_ID" in capsys.readouterr().err
