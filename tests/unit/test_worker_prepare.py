"""What a worker's parent prepares for its horses (stack.lanes.jobs.prepare_worker).

The parent builds settings and engines once and warms what every job runs first; a
forked horse reuses the engines but never a connection; the merit lane never imports
httpx; a job's reads take no write lock. Causal checks only: which modules are loaded,
which objects a fork sees, whether a call completes while another connection holds
the write lock. Speed is measured by loadtests/bench_lanes.py, not here.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest
from sqlalchemy import event
from sqlalchemy.exc import OperationalError

from netsupport import REPO
from stack.config import Settings
from stack.lanes import jobs
from stack.ledger import attempts, outbox
from stack.ledger.engine import init_ledger, make_engine


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    current = Settings(run_dir=tmp_path, exams={"NOVA-101": 4})
    init_ledger(make_engine(current), current)
    for name, value in current.to_env().items():
        monkeypatch.setenv(name, value)
    jobs.reset_process_state()
    yield current
    jobs.reset_process_state()


def _loads_httpx_after_prepare(lane: str, settings: Settings) -> bool:
    probe = ("import sys, stack.lanes.worker as w; w.prepare_worker(sys.argv[1]); "
             "print(json.dumps('httpx' in sys.modules))")
    env = {**os.environ, **settings.to_env()}
    out = subprocess.run([sys.executable, "-c", f"import json; {probe}", lane], cwd=REPO, env=env,
                         capture_output=True, text=True, check=True)
    return bool(json.loads(out.stdout.strip().splitlines()[-1]))


def test_a_merit_worker_never_imports_httpx_a_provider_lane_does(settings: Settings) -> None:
    assert _loads_httpx_after_prepare("merit", settings) is False
    assert _loads_httpx_after_prepare("sms", settings) is True  # the probe sees httpx when it is loaded


def test_prepare_warms_the_statement_cache_the_horses_inherit(settings: Settings) -> None:
    cold = jobs._current()
    assert len(cold.reader._compiled_cache) == len(cold.engine._compiled_cache) == 0  # nothing runs, nothing compiled
    jobs.prepare_worker("merit")
    warm = jobs._current()
    assert len(warm.reader._compiled_cache) >= 2  # ready_outcome and get_row
    assert len(warm.engine._compiled_cache) >= 3  # and the done mark


def test_a_forked_horse_reuses_the_parents_engines_but_builds_its_own_client(settings: Settings) -> None:
    jobs.prepare_worker("sms")
    parent = jobs._current()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the horse
        os.close(read)
        mine = jobs._current()
        seen = {"pid": mine.pid == os.getpid(), "engine": mine.engine is parent.engine,
                "reader": mine.reader is parent.reader, "http_before_call": mine.http is not None}
        os.write(write, json.dumps(seen).encode())
        os._exit(0)
    os.close(write)
    seen = json.loads(os.read(read, 4096))
    os.close(read)
    os.waitpid(pid, 0)
    assert seen == {"pid": True, "engine": True, "reader": True, "http_before_call": False}
    assert jobs._current() is parent  # the parent's own state is untouched


def test_prepare_survives_an_unreachable_ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "not-a-dir").write_text("")
    broken = Settings(run_dir=tmp_path, database_url=f"sqlite:///{tmp_path}/not-a-dir/ledger.db")
    for name, value in broken.to_env().items():
        monkeypatch.setenv(name, value)
    jobs.reset_process_state()
    with caplog.at_level(logging.WARNING, logger="proctor.jobs"):
        jobs.prepare_worker("merit")
    assert "ledger not warmed" in caplog.text
    jobs.reset_process_state()


def test_a_jobs_reads_complete_while_another_connection_holds_the_write_lock(settings: Settings) -> None:
    engine = make_engine(settings)
    attempts.ensure_student(engine, "s1")
    attempt, _ = attempts.start_attempt(engine, "s1", "NOVA-101", None)
    op = attempts.finish_attempt(engine, attempt.id, "web_1").operation_ids[0]
    holder = sqlite3.connect(settings.ledger_url.removeprefix("sqlite:///"), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # an answer being committed, say
    try:
        contender = sqlite3.connect(settings.ledger_url.removeprefix("sqlite:///"), timeout=0, isolation_level=None)
        with pytest.raises(sqlite3.OperationalError, match="locked"):  # the lock is really held
            contender.execute("BEGIN IMMEDIATE")
        contender.close()
        row = jobs._unless_ready(jobs._current(), op, lambda conn, row: row)
        assert row is not None and row["operation_id"] == op
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_the_write_engine_would_queue_behind_that_lock(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control for the test above: a BEGIN IMMEDIATE read is refused while the lock is held."""
    monkeypatch.setattr("stack.ledger.engine.SQLITE_BUSY_TIMEOUT_MS", 0)
    holder = sqlite3.connect(settings.ledger_url.removeprefix("sqlite:///"), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(OperationalError, match="locked"):
            with make_engine(settings).begin() as conn:
                outbox.get_row(conn, "merit-a1")
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def _connections_opened_by_two_merit_jobs(settings: Settings) -> int:
    engine = make_engine(settings)
    attempts.ensure_student(engine, "s1")
    attempt, _ = attempts.start_attempt(engine, "s1", "NOVA-101", None)
    finish = attempts.finish_attempt(engine, attempt.id, "web_1")
    process = jobs._current()
    opened = []
    for ledger in {process.engine, process.reader}:
        event.listen(ledger, "connect", lambda *_: opened.append(1))
    merit = [op for op in finish.operation_ids if op.startswith("merit-")][0]
    jobs.compute_merit_card(merit)  # reads, computes, writes the card
    jobs.compute_merit_card(merit)  # a replay: reads, finds the card, marks the row done
    return len(opened)


def test_a_simple_worker_keeps_its_ledger_connections_between_jobs(settings: Settings) -> None:
    jobs.prepare_worker("merit")  # the default model of every lane: simple
    assert _connections_opened_by_two_merit_jobs(settings) <= 2  # once per engine, then reused


def test_a_forking_worker_opens_a_connection_per_transaction(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """Control for the test above: its horses must never inherit an open connection."""
    monkeypatch.setenv("PROCTOR_WORKER_MODEL", "merit:fork")
    jobs.reset_process_state()
    jobs.prepare_worker("merit")
    assert _connections_opened_by_two_merit_jobs(settings) >= 4  # two reads and two writes
