"""The relay's batched enqueue (#12): one Valkey pipeline and one ledger commit per batch.

Batching must keep the one-row contract: the job in Valkey is the one ``enqueue_operation``
writes, a repeat of a job id is a no-op (never a second copy, never an overwrite of a job
already running), and a crash between Valkey and the ledger costs no row and no duplicate.
The reconciler inspects all enqueued rows' jobs in two pipelined round trips, with the
verdict of the one-job inspection.
"""

from __future__ import annotations

import sqlite3

import pytest
from redis import Redis
from rq import Queue
from rq.job import Job

from stack.config import Settings
from stack.lanes.enqueue import enqueue_operation, enqueue_operations
from stack.ledger import outbox
from stack.ledger.backlog import seed_backlog
from stack.ledger.engine import make_engine
from stack.lanes.worker import liveness_key
from stack.relay import ENQUEUE_BATCH, PENDING_PAGE, inspect_job, inspect_jobs
from test_relay import relay, row, settings, valkey, valkey_port  # noqa: F401 - fixtures

pytestmark = pytest.mark.integration

_STAMPS = {b"created_at", b"enqueued_at"}


def _job_hash(valkey: Redis, jid: str) -> dict[bytes, bytes]:
    return {name: value for name, value in valkey.hgetall(Job.key_for(jid)).items() if name not in _STAMPS}


def test_a_batched_job_is_the_job_a_single_enqueue_writes(settings: Settings, valkey: Redis) -> None:
    single = enqueue_operation(valkey, settings, "narrative", "narrative-x1", 1)
    [batched] = enqueue_operations(valkey, settings, [("narrative", "narrative-x2", 1)])
    one, other = _job_hash(valkey, single), _job_hash(valkey, batched)
    assert one.keys() == other.keys()
    differing = {name for name in one if one[name] != other[name]}
    assert differing == {b"data", b"description"}  # the operation id and job id, nothing else
    assert Queue("ai", connection=valkey).job_ids == [single, batched]


def test_a_repeated_job_id_in_a_batch_is_a_no_op(settings: Settings, valkey: Redis) -> None:
    [first] = enqueue_operations(valkey, settings, [("merit", "merit-a1", 1)])
    valkey.hset(Job.key_for(first), "status", "started")  # a worker runs it meanwhile
    jids = enqueue_operations(valkey, settings, [("merit", "merit-a1", 1), ("merit", "merit-a2", 1)])
    assert jids == [first, "merit-a2-1"]
    assert valkey.hget(Job.key_for(first), "status") == b"started"  # not overwritten back to queued
    assert Queue("merit", connection=valkey).job_ids == [first, "merit-a2-1"]  # no second copy


def test_a_crash_between_valkey_and_the_ledger_loses_no_row_and_sends_no_duplicate(
    settings: Settings, valkey: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed_backlog(make_engine(settings), ENQUEUE_BATCH + 20)  # more than one batch: a partial pass
    mark = outbox.mark_enqueued_many
    calls = []

    def crash_on_the_second_batch(conn, sent, now=None):
        calls.append(len(sent))
        if len(calls) == 2:
            raise RuntimeError("relay killed after the pipeline, before the commit")
        return mark(conn, sent, now)

    monkeypatch.setattr(outbox, "mark_enqueued_many", crash_on_the_second_batch)
    the_relay = relay(settings, valkey)
    with pytest.raises(RuntimeError):
        the_relay.run_once()
    sent_before = len(Queue("ai", connection=valkey).job_ids) + len(Queue("sms", connection=valkey).job_ids)
    assert sent_before > ENQUEUE_BATCH  # the second batch reached Valkey, its rows stayed pending
    while the_relay.run_once().enqueued:
        pass
    narratives = Queue("ai", connection=valkey).job_ids
    assert len(narratives) == len(set(narratives)) == ENQUEUE_BATCH + 20
    assert len(Queue("sms", connection=valkey).job_ids) == ENQUEUE_BATCH + 20
    assert all(row(settings, jid.rsplit("-", 1)[0])["status"] == "enqueued" for jid in narratives[-20:])


def test_pipelined_inspection_gives_each_job_its_own_verdict(settings: Settings, valkey: Redis) -> None:
    jids = enqueue_operations(valkey, settings, [("merit", f"merit-j{i}", 1) for i in range(5)])
    queued, failed, live, dead, vanished = jids
    valkey.hset(Job.key_for(failed), "status", "failed")
    valkey.hset(Job.key_for(live), mapping={"status": "started", "worker_name": "w-live"})
    valkey.set(liveness_key("w-live"), 1)
    valkey.hset(Job.key_for(dead), mapping={"status": "started", "worker_name": "w-dead"})
    valkey.delete(Job.key_for(vanished))
    verdicts = inspect_jobs(valkey, jids)
    assert verdicts[queued] is None and verdicts[live] is None
    assert verdicts[failed] == ("job failed", False)
    assert verdicts[dead] == ("worker w-dead lost (liveness key gone)", True)
    assert verdicts[vanished] == ("job vanished from Valkey", False)
    assert verdicts == {jid: inspect_job(valkey, jid) for jid in jids}  # the one-job path agrees


class _RecordingStop:
    """A stop event that records each wait and stops the loop after ``passes`` waits."""

    def __init__(self, passes: int) -> None:
        self.waits: list[float] = []
        self.passes = passes

    def is_set(self) -> bool:
        return len(self.waits) >= self.passes

    def wait(self, timeout: float) -> bool:
        self.waits.append(timeout)
        return self.is_set()


def test_a_full_page_starts_the_next_pass_at_once_and_a_partial_one_waits(settings: Settings, valkey: Redis) -> None:
    seed_backlog(make_engine(settings), PENDING_PAGE // 2 + 10)  # 2 rows each: one full page, then 20 rows
    stop = _RecordingStop(passes=3)
    relay(settings, valkey).run_forever(stop)  # type: ignore[arg-type] - only is_set() and wait() are used
    assert stop.waits == [0.0, settings.relay_interval, settings.relay_interval]
    assert len(Queue("ai", connection=valkey).job_ids) == PENDING_PAGE // 2 + 10


def test_a_pass_with_nothing_to_write_never_takes_the_write_lock(
    settings: Settings, valkey: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pass's scans read a WAL snapshot: while another process holds the write lock, a pass
    over healthy enqueued rows finishes without waiting for it (its scans under BEGIN IMMEDIATE
    held that lock for tens of ms per pass under a 4,000-row backlog, and merit cards waited)."""
    monkeypatch.setattr("stack.ledger.engine.SQLITE_BUSY_TIMEOUT_MS", 200)  # a lock wait fails in 0.2 s, not 10
    current = settings.with_overrides(reconciler_enabled=True)
    assert relay(current, valkey).run_once().enqueued == ["merit-a1"]
    held = sqlite3.connect(current.run_dir / "ledger.db", isolation_level=None)
    held.execute("BEGIN IMMEDIATE")  # another writer, mid-transaction
    try:
        report = relay(current, valkey).run_once()  # scans pending, blocked and enqueued rows
    finally:
        held.execute("ROLLBACK")
        held.close()
    assert report.enqueued == report.reenqueued == report.failed == []
    valkey.flushall()  # the snapshot-read scan still finds a lost job
    assert relay(current, valkey).run_once().reenqueued == ["merit-a1"]


def test_the_reconciler_inspects_only_jobs_that_left_their_queue(
    settings: Settings, valkey: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backlog's waiting jobs cost one list read, not a job hash read each; the jobs that left
    the queue (taken by a worker, finished, failed, lost) are still inspected one by one."""
    seed_backlog(make_engine(settings), 30)
    current = settings.with_overrides(reconciler_enabled=True)
    while relay(current, valkey).run_once().enqueued:
        pass
    [taken, *_] = Queue("ai", connection=valkey).job_ids
    valkey.lrem(Queue("ai", connection=valkey).key, 0, taken)  # a worker took it ...
    valkey.hset(Job.key_for(taken), mapping={"status": "started", "worker_name": "w-dead"})  # ... and died
    inspected: list[str] = []

    def recording(redis: Redis, jids: list[str]) -> dict:
        inspected.extend(jids)
        return inspect_jobs(redis, jids)

    monkeypatch.setattr("stack.relay.inspect_jobs", recording)
    report = relay(current, valkey).run_once()
    assert inspected == [taken] and report.reenqueued == [taken.rsplit("-", 1)[0]]
