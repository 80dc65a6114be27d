"""The ledger's write-lock trace (loadtests/lock_trace/sitecustomize.py) and its report
(loadtests/lock_report.py), without a stack: real SQLite in a child process, hand-written traces."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lock_report import Transaction, main, read_trace, step_summary

ROOT = Path(__file__).resolve().parents[2]

WRITES = textwrap.dedent("""
    import sqlite3, sys
    import sqlalchemy as sa
    db = sys.argv[1]
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("CREATE TABLE IF NOT EXISTS t (x)")  # autocommit, outside any BEGIN IMMEDIATE: not traced
    cur = conn.cursor()
    cur.execute("BEGIN IMMEDIATE"); cur.execute("INSERT INTO t VALUES (1)"); cur.execute("INSERT INTO t VALUES (2)")
    cur.execute("COMMIT")
    cur.execute("SELECT count(*) FROM t").fetchall()  # a read on its own: not traced
    cur.execute("BEGIN IMMEDIATE"); cur.execute("UPDATE t SET x = 3"); cur.execute("ROLLBACK")
    engine = sa.create_engine(f"sqlite:///{db}")  # SQLAlchemy connects through sqlite3.dbapi2
    sa.event.listen(engine, "begin", lambda c: c.exec_driver_sql("BEGIN IMMEDIATE"))
    with engine.begin() as c:
        c.exec_driver_sql("DELETE FROM t WHERE x = 1")
""")


def _run_writes(tmp_path: Path, traced: bool) -> Path:
    trace = tmp_path / "lock_trace"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "loadtests" / "lock_trace"), "PROCTOR_COMPONENT": "web_1"}
    env.pop("PROCTOR_LOCK_TRACE_DIR", None)
    if traced:
        env["PROCTOR_LOCK_TRACE_DIR"] = str(trace)
    subprocess.run([sys.executable, "-c", WRITES, str(tmp_path / "ledger.db")], env=env, check=True, timeout=60)
    return trace


def test_each_write_transaction_is_logged_with_its_statements_and_outcome(tmp_path: Path) -> None:
    found = sorted(read_trace(_run_writes(tmp_path, traced=True)), key=lambda tx: tx.asked)
    assert [(tx.outcome, tx.statements, tx.first) for tx in found] == [
        ("commit", 2, "INSERT INTO t VALUES (1)"),
        ("rollback", 1, "UPDATE t SET x = 3"),
        ("commit", 1, "DELETE FROM t WHERE x = 1"),  # SQLAlchemy's commit() of the DB-API connection
    ]
    assert {tx.component for tx in found} == {"web_1"}
    assert all(tx.asked <= tx.got <= tx.released for tx in found)


def test_without_the_variable_nothing_is_wrapped_or_written(tmp_path: Path) -> None:
    assert not _run_writes(tmp_path, traced=False).exists()


def _tx(component: str, got: float, hold: float, wait: float = 0.0, first: str = "INSERT INTO answers") -> Transaction:
    return Transaction(component, 1, got - wait, got, got + hold, 3, "commit", first)


def test_a_step_counts_the_transactions_that_got_the_lock_in_its_window() -> None:
    trace = [_tx("web_1", 99.9, 0.5),  # got the lock before the step: not its own
             _tx("web_1", 100.0, 0.5, wait=0.01), _tx("web_2", 104.0, 0.5, wait=0.03),
             _tx("worker_merit_1", 105.0, 0.8, wait=0.02, first="SELECT outbox.operation_id FROM outbox WHERE outbox.operation_id = ?"),
             _tx("web_2", 110.0, 0.5)]  # the next step's
    summary = step_summary(trace, 100.0, 110.0, requests=50)
    assert summary["write_transactions"] == 3
    assert summary["held_share"] == pytest.approx(0.18)
    assert summary["held_ms_per_request"] == pytest.approx(36.0)
    assert (summary["wait_p50_ms"], summary["wait_p99_ms"]) == (20.0, 30.0)
    web, worker = summary["holders"]
    assert (web["component"], web["transactions"], web["held_s"]) == ("web", 2, 1.0)  # both nodes, one kind
    assert (worker["component"], worker["first"], worker["held_s"]) == ("worker_merit", "SELECT outbox.operation_id FROM outbox", 0.8)


def test_an_empty_step_has_no_quantiles_and_no_cost_per_request() -> None:
    summary = step_summary([], 0.0, 10.0, requests=0)
    assert summary == {"write_transactions": 0, "held_share": 0.0, "held_ms_per_request": None,
                       "wait_p50_ms": None, "wait_p99_ms": None, "holders": []}


def test_a_line_cut_short_by_a_kill_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "web_1-7.tsv").write_text("7\tweb_1\t1\t1.0\t1.1\t1.2\t4\tcommit\tINSERT INTO answers\n7\tweb_1\t1\t2.0\t2.")
    assert [tx.got for tx in read_trace(tmp_path)] == [1.1]


def test_the_report_names_a_folder_without_a_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main([str(tmp_path)])
    assert stopped.value.code == 2 and "no lock trace here" in capsys.readouterr().err
