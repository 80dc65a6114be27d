"""Finding 6: write-once of outcomes held only on SQLite. ``write_ready`` checked, then
inserted, with no unique index: under PostgreSQL's read committed a re-enqueued job racing
its paused original could write two ``ready`` outcomes. Now a partial unique index (one
``ready`` row per operation id) enforces it on both databases and the losing job reads the
conflict as "already done".

The race is forced, not hoped for: both jobs are held just before their insert until both
have checked (and seen no outcome). With the index the second insert waits for the first
commit, conflicts and backs off; with the index dropped (the negative control: no
constraint and, on PostgreSQL, no lock) both insert and the effects checker reports it.
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import pytest
from stack.embedded.postgres import PostgresServer
from sqlalchemy import Engine, func, select, text
from sqlalchemy.exc import IntegrityError

from chaos.checkers import CheckOptions
from chaos.checkers.base import Result
from chaos.checkers.effects import check_effects
from chaos.ledgers import load_ledgers
from stack.config import Settings
from stack.lanes import jobs
from stack.ledger import outcomes
from stack.ledger.attempts import finish_attempt, start_attempt
from stack.ledger.engine import init_ledger, make_engine
from stack.ledger.exports import export_rows
from stack.ledger.roster import issue_roster
from stack.ledger.schema import OUTCOME_READY_INDEX
from stack.ledger.schema import outcomes as outcomes_table

pytestmark = pytest.mark.integration


def _settings(tmp_path: Path, url: str = "") -> Settings:
    return Settings(run_dir=tmp_path, database_url=url, exams={"NOVA-101": 2},
                    time_scale=0.001).with_overrides(allow_default_secrets=True)


def _finished_attempt(engine: Engine) -> str:
    issue_roster(engine, "k", "NOVA-101", ["s-1"])
    attempt, _ = start_attempt(engine, "s-1", "NOVA-101", None)
    finish_attempt(engine, attempt.id, "web_test")
    return attempt.id


def _ready_rows(engine: Engine, op: str) -> int:
    with engine.connect() as conn:
        query = select(func.count()).select_from(outcomes_table)
        return int(conn.execute(query.where(outcomes_table.c.operation_id == op, outcomes_table.c.status == "ready")).scalar_one())


def test_sqlite_refuses_a_second_ready_outcome(tmp_path: Path) -> None:
    engine = make_engine(_settings(tmp_path))
    init_ledger(engine, _settings(tmp_path))
    op = f"merit-{_finished_attempt(engine)}"
    with engine.begin() as conn:
        assert outcomes.write_ready(conn, op, op[6:], "merit", {"n": 1}) is True
        assert outcomes.write_ready(conn, op, op[6:], "merit", {"n": 2}) is False
    with pytest.raises(IntegrityError), engine.begin() as conn:  # even a writer that skips the check
        conn.execute(outcomes_table.insert().values(operation_id=op, attempt_id=op[6:], kind="merit", status="ready",
                                                    payload="{}", created_at=0.0))
    assert _ready_rows(engine, op) == 1
    engine.dispose()


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    with PostgresServer() as server:
        yield server


def _race_two_merit_jobs(tmp_path: Path, server: PostgresServer, drop_index: bool,
                         monkeypatch: pytest.MonkeyPatch) -> tuple[Engine, str]:
    url = server.url
    settings = _settings(tmp_path, url)
    engine = make_engine(settings)
    with engine.begin() as conn:  # a clean schema per test: the module shares one cluster
        conn.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    init_ledger(engine, settings)
    if drop_index:
        with engine.begin() as conn:
            conn.execute(text(f"DROP INDEX {OUTCOME_READY_INDEX}"))
    op = f"merit-{_finished_attempt(engine)}"
    for name, value in settings.to_env().items():
        monkeypatch.setenv(name, value)
    jobs.reset_process_state()
    jobs._current()  # build the job state once: two threads building it at once would leak an engine
    both_checked = threading.Barrier(2, timeout=30)
    real_insert = outcomes._insert

    def insert_after_both_checked(*args, **kwargs):  # type: ignore[no-untyped-def]
        both_checked.wait()  # each job has seen "no ready outcome" inside its own transaction
        return real_insert(*args, **kwargs)

    monkeypatch.setattr(outcomes, "_insert", insert_after_both_checked)
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: jobs.compute_merit_card(op), range(2)))
    assert [r["status"] for r in results] == ["ready", "ready"]
    jobs.reset_process_state()
    return engine, op


def _effects_verdict(engine: Engine, tmp_path: Path) -> Result:
    """The effects checker on the ledger as the harness would export it."""
    folder = tmp_path / "ledgers"
    folder.mkdir()
    with engine.connect() as conn:
        for table in ("attempts", "answers", "outbox", "outcomes"):
            (folder / f"{table}.json").write_text(json.dumps({"table": table, "exported_at": 0.0,
                                                              "rows": export_rows(conn, table)}))
    for provider in ("ai", "sms"):
        (folder / f"{provider}_effects.json").write_text(json.dumps({"provider": provider, "exported_at": 0.0, "effects": []}))
    return check_effects([], load_ledgers(tmp_path), CheckOptions(allow_pending=frozenset({"narrative", "sms"})))


def test_two_racing_jobs_write_one_outcome_on_postgresql(
    tmp_path: Path, postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, op = _race_two_merit_jobs(tmp_path, postgres, drop_index=False, monkeypatch=monkeypatch)
    assert _ready_rows(engine, op) == 1
    verdict = _effects_verdict(engine, tmp_path)
    assert verdict.valid is True, verdict.to_dict()
    engine.dispose()


def test_negative_control_without_the_index_the_race_writes_twice(
    tmp_path: Path, postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, op = _race_two_merit_jobs(tmp_path, postgres, drop_index=True, monkeypatch=monkeypatch)
    assert _ready_rows(engine, op) == 2
    verdict = _effects_verdict(engine, tmp_path)
    assert verdict.valid is False and "duplicated_outcomes" in verdict.violations, verdict.to_dict()
    engine.dispose()
