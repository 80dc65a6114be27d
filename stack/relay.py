"""``python -m stack.relay``: the outbox relay and reconciler.

Every ``relay_interval`` seconds:

1. pending rows -> enqueue a fresh job ``<operation_id>-<n>`` -> row ``enqueued``,
   ``ENQUEUE_BATCH`` rows at a time: one Valkey pipeline, then one ledger transaction
   (a pass that moved a full ``PENDING_PAGE`` starts the next pass without waiting);
   merit first: a narrative or SMS row only once its attempt's merit row is ``done``
   (those jobs read the card), and failed for review with it if the merit row gave up.
2. if the reconciler is on, each enqueued row's job that is no longer waiting in its
   lane's queue (``queued_job_ids``) is inspected in Valkey:
   - hash gone (Valkey restarted empty / flushed), or failed / stopped / canceled,
   - or ``started`` by a worker whose ``proctor:alive:<name>`` key is gone,
   - or ``queued`` but held in RQ's ``<queue>:intermediate`` list for longer than
     one liveness TTL: a worker took it (atomic BLMOVE) and died before its horse
     marked it started. RQ would only fail it minutes later; nothing re-queues it.
   and is re-enqueued as job ``n+1``; once ``n`` reached ``max_job_attempts`` the row
   is ``failed`` with a ``failed_for_review`` outcome and an audit record instead.

Valkey is a queue, never the truth: the outbox row says what is owed, so losing
Valkey's data costs a re-enqueue, never the work. With the reconciler off only
step 1 runs: the negative control where a killed job stays lost.

Re-enqueues go to Valkey before the row moves: a crash in between costs at most a
duplicate run of an idempotent job, never a row pointing at a job that was never sent.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

from redis import Redis
from redis.exceptions import RedisError
from rq.exceptions import NoSuchJobError
from rq.intermediate_queue import IntermediateQueue
from rq.job import Job, JobStatus
from rq.queue import Queue
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from stack.config import Settings, load_settings
from stack.connection_stats import process_stats, record_process_connections
from stack.valkey_client import valkey_client
from stack.lanes.enqueue import Enqueue, enqueue_operation, enqueue_operations
from stack.lanes.queues import JOB_SERIALIZER, job_id, lane_routes
from stack.lanes.worker import RELAY_LIVENESS, LivenessBeat, liveness_key
from stack.ledger import outbox, outcomes
from stack.ledger.engine import make_engine, make_reader
from stack.priority import apply_niceness

__all__ = [
    "ENQUEUE_BATCH", "PENDING_PAGE", "LimboWatch", "PassReport", "Relay", "SendAndMark", "Verdict",
    "inspect_job", "inspect_jobs", "ledger_then_valkey", "main", "queued_job_ids", "send_and_mark_policy",
    "valkey_then_ledger",
]

ENQUEUE_BATCH = 100
"""Pending rows per Valkey pipeline and per ledger commit. One commit per row held the relay
to 15-40 rows/s on a loaded 2-core machine (a 2,000-job backlog took minutes to enqueue);
a batch's write transaction still lasts milliseconds, so web nodes barely wait for the lock."""

PENDING_PAGE = 500
"""Pending rows read per pass. A pass that moved a whole page starts the next at once
instead of after ``relay_interval``: a backlog drains at the relay's speed, not a page per interval."""

_BACKOFF_MAX = 5.0
_DEAD_STATUSES = {JobStatus.FAILED.value, JobStatus.STOPPED.value, JobStatus.CANCELED.value}

log = logging.getLogger("proctor.relay")


class Verdict(NamedTuple):
    reason: str
    abandoned: bool  # started by a dead worker: still sits in RQ's started registry


def inspect_job(redis: Redis, jid: str) -> Verdict | None:
    """Why the job needs replacing, or None while it is queued, running or finished."""
    return inspect_jobs(redis, [jid])[jid]


def inspect_jobs(redis: Redis, jids: list[str]) -> dict[str, Verdict | None]:
    """``inspect_job`` for many jobs in two pipelined round trips instead of one or two per job
    (thousands of enqueued rows during a backlog made each reconcile pass take seconds).

    Reads two hash fields instead of ``Job.fetch`` and never lists the started
    registry: listing it runs RQ's abandoned-job cleanup in this process.
    """
    pipe = redis.pipeline(transaction=False)
    for jid in jids:
        pipe.hmget(Job.key_for(jid), "status", "worker_name")
    fields = {jid: tuple(None if v is None else v.decode() for v in pair) for jid, pair in zip(jids, pipe.execute())}
    workers = sorted({worker for status, worker in fields.values() if status == JobStatus.STARTED.value and worker})
    pipe = redis.pipeline(transaction=False)
    for worker in workers:
        pipe.exists(liveness_key(worker))
    alive = {worker for worker, exists in zip(workers, pipe.execute()) if exists}
    return {jid: _verdict(status, worker, alive) for jid, (status, worker) in fields.items()}


def queued_job_ids(redis: Redis, lanes: set[str]) -> set[str]:
    """Ids still waiting in the lanes' queues: one LRANGE per lane, in one round trip.

    A job whose id sits in its queue is healthy, so the reconciler inspects only the others.
    Inspecting each of a 4,000-job backlog's jobs cost the relay ~50 ms of CPU per pass (a
    pipelined HMGET per job); one list reply costs a tenth of it. A listed id always has
    its hash here: RQ writes the hash before it pushes the id, jobs carry no TTL, Valkey
    runs ``maxmemory-policy noeviction``, and Valkey losing data loses list and hash
    together. A hash deleted by hand while its id stays listed is found one pass after a
    worker drops the id, as vanished.
    """
    pipe = redis.pipeline(transaction=False)
    for lane in sorted(lanes):
        pipe.lrange(Queue(lane, connection=redis).key, 0, -1)
    return {jid.decode() for ids in pipe.execute() for jid in ids}


def _verdict(status: str | None, worker: str | None, alive: set[str]) -> Verdict | None:
    if status is None:
        return Verdict("job vanished from Valkey", abandoned=False)
    if status in _DEAD_STATUSES:
        return Verdict(f"job {status}", abandoned=False)
    if status == JobStatus.STARTED.value and worker not in alive:
        return Verdict(f"worker {worker or '?'} lost (liveness key gone)", abandoned=True)
    return None


@dataclass
class PassReport:
    enqueued: list[str] = field(default_factory=list)
    reenqueued: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    more_pending: bool = False  # the pass moved a full page of pending rows: the next one starts at once


class LimboWatch:
    """Jobs seen ``queued`` in a lane's intermediate list, and since when.

    A live worker moves a job from the intermediate list to ``started`` within
    milliseconds, so one that stays there past ``grace`` seconds was taken by a
    worker that died. Lists are read once per pass, only when a queued row exists.
    """

    def __init__(self, redis: Redis, grace: float) -> None:
        self.redis = redis
        self.grace = grace
        self.first_seen: dict[str, float] = {}
        self._held: dict[str, set[str]] = {}

    def new_pass(self) -> None:
        self._held = {}

    def _held_in(self, lane: str) -> set[str]:
        if lane not in self._held:
            key = IntermediateQueue.get_intermediate_queue_key(Queue(lane, connection=self.redis).key)
            self._held[lane] = {jid.decode() for jid in self.redis.lrange(key, 0, -1)}
        return self._held[lane]

    def verdict(self, lane: str, jid: str) -> Verdict | None:
        if jid not in self._held_in(lane):
            self.first_seen.pop(jid, None)
            return None
        held_for = time.monotonic() - self.first_seen.setdefault(jid, time.monotonic())
        if held_for < self.grace:
            return None
        return Verdict(f"held {held_for:.1f}s between dequeue and start (worker died)", abandoned=True)

    def release(self, lane: str, jid: str) -> None:
        key = IntermediateQueue.get_intermediate_queue_key(Queue(lane, connection=self.redis).key)
        self.redis.lrem(key, 0, jid)
        self.first_seen.pop(jid, None)


def relay_passes(relay: "Relay", settings: Settings) -> tuple[Callable[[PassReport], None], ...]:
    """What one relay pass does, chosen once at start-up: the one place PROCTOR_RECONCILER is
    read. Off is the negative control (a job lost with its worker stays lost)."""
    passes = (relay.enqueue_pending, relay.fail_blocked)
    return (*passes, relay.reconcile) if settings.controls.reconciler_enabled else passes


SendAndMark = Callable[["Relay", list[Enqueue]], list[str]]
"""How a batch of pending rows becomes enqueued jobs: (relay, enqueues) -> the ops whose rows moved."""


def valkey_then_ledger(relay: "Relay", items: list[Enqueue]) -> list[str]:
    """Valkey first, the ledger second: a row moves only once Valkey accepted its job. Valkey
    refusing (down, or full under noeviction) leaves the rows pending for the next pass, and
    a crash in between costs a repeat of the same job ids, a no-op in Valkey."""
    enqueue_operations(relay.redis, relay.settings, items)
    return relay.mark(items)


def ledger_then_valkey(relay: "Relay", items: list[Enqueue]) -> list[str]:
    """NEGATIVE CONTROL (PROCTOR_RELAY_MARK_EARLY): the rows are marked enqueued before Valkey
    accepted their jobs. When Valkey refuses the enqueue (full under noeviction), the rows point
    at jobs that never existed; no later pass sends them again (only the reconciler could)."""
    moved = relay.mark(items)
    enqueue_operations(relay.redis, relay.settings, items)
    return moved


def send_and_mark_policy(settings: Settings) -> SendAndMark:
    """Chosen once at start-up: the one place PROCTOR_RELAY_MARK_EARLY is read."""
    return ledger_then_valkey if settings.controls.relay_mark_early else valkey_then_ledger


class Relay:
    def __init__(self, settings: Settings, engine: Engine, redis: Redis) -> None:
        self.settings = settings
        self.engine = engine
        # The pass's scans (pending page, blocked rows, every enqueued row) read a snapshot:
        # under a 4,000-row backlog they held the write lock ~tens of ms every pass, and merit
        # cards and answers waited for it. Every write below re-checks the row's state in its
        # WHERE clause, so a snapshot a moment old is as good as the lock's read was.
        self.reader = make_reader(settings, engine)
        self.redis = redis
        self.limbo = LimboWatch(redis, grace=settings.liveness_ttl)
        self.lane_of_kind = lane_routes(settings)
        self.passes = relay_passes(self, settings)
        self.send_and_mark = send_and_mark_policy(settings)

    def run_once(self) -> PassReport:
        report = PassReport()
        for one_pass in self.passes:
            one_pass(report)
        return report

    def enqueue_pending(self, report: PassReport) -> None:
        with self.reader.begin() as conn:
            rows = outbox.enqueueable(conn, limit=PENDING_PAGE)
        for first in range(0, len(rows), ENQUEUE_BATCH):
            self._enqueue_batch(rows[first:first + ENQUEUE_BATCH], report)
        report.more_pending = len(report.enqueued) == PENDING_PAGE

    def _enqueue_batch(self, rows: list[dict[str, Any]], report: PassReport) -> None:
        items = [(row["kind"], row["operation_id"], row["attempts"] + 1) for row in rows]
        moved = self.send_and_mark(self, items)
        for op in moved:
            log.info("enqueued %s", op)
        report.enqueued.extend(moved)

    def mark(self, items: list[Enqueue]) -> list[str]:
        """Rows -> ``enqueued`` with the job ids their enqueues get, in one ledger transaction."""
        with self.engine.begin() as conn:
            return outbox.mark_enqueued_many(conn, [(op, number, job_id(op, number)) for _, op, number in items])

    def fail_blocked(self, report: PassReport) -> None:
        """A narrative/SMS row whose merit card gave up can never run: fail it for review, visibly."""
        with self.reader.begin() as conn:
            rows = outbox.blocked_by_failed_merit(conn)
        for row in rows:
            op = row["operation_id"]
            reason = f"merit-{row['attempt_id']} failed for review; no card to report"
            detail = {"operation_id": op, "reason": reason, "attempts": row["attempts"]}
            with self.engine.begin() as conn:
                moved = outbox.mark_failed_pending(conn, op, reason)
                if moved:
                    outcomes.write_failed_for_review(conn, op, row["attempt_id"], row["kind"], detail)
                    outcomes.audit(conn, "relay", "failed_for_review", detail)
            if moved:
                log.error("gave up on %s: %s", op, reason)
                report.failed.append(op)

    def reconcile(self, report: PassReport) -> None:
        with self.reader.begin() as conn:
            rows = outbox.rows_with_status(conn, "enqueued", limit=5000)
        self.limbo.new_pass()
        waiting = queued_job_ids(self.redis, {self.lane_of_kind[row["kind"]] for row in rows})
        suspects = [row for row in rows if row["job_id"] not in waiting]
        verdicts = inspect_jobs(self.redis, [row["job_id"] for row in suspects])
        for row in suspects:
            verdict = verdicts[row["job_id"]]
            if verdict is None:
                verdict = self.limbo.verdict(self.lane_of_kind[row["kind"]], row["job_id"])
            if verdict is None:
                continue
            # Replace first, clean up second: the ledger must point at the replacement (or
            # the failed-for-review record) before the old job leaves the only place a later
            # pass would find it. Cleaning up first, a Valkey error in between left a job
            # `queued` in no list, invisible to every later pass (stuck for good).
            if outbox.lost_runs(row) >= self.settings.max_job_attempts:
                self._give_up(row, verdict.reason, report)
            else:
                self._reenqueue(row, verdict.reason, report)
            if verdict.abandoned:
                self.limbo.release(self.lane_of_kind[row["kind"]], row["job_id"])
                self._forget(row["job_id"])

    def _forget(self, jid: str) -> None:
        """Drop an abandoned started job from RQ's registries so RQ's own cleanup never acts on it."""
        try:
            Job.fetch(jid, connection=self.redis, serializer=JOB_SERIALIZER).delete()
        except NoSuchJobError:
            pass

    def _reenqueue(self, row: dict[str, Any], reason: str, report: PassReport) -> None:
        op, previous = row["operation_id"], row["job_id"]
        number = row["attempts"] + 1
        jid = enqueue_operation(self.redis, self.settings, row["kind"], op, number)
        with self.engine.begin() as conn:
            moved = outbox.mark_reenqueued(conn, op, previous, number, jid, f"{previous}: {reason}")
            if moved:
                outcomes.audit(conn, "relay", "reenqueue", {"operation_id": op, "from": previous, "to": jid, "reason": reason})
        if moved:
            log.warning("re-enqueued %s as %s: %s was %s", op, jid, previous, reason)
            report.reenqueued.append(op)

    def _give_up(self, row: dict[str, Any], reason: str, report: PassReport) -> None:
        op, previous = row["operation_id"], row["job_id"]
        detail = {
            "operation_id": op,
            "reason": reason,
            "attempts": row["attempts"],
            "deferrals": row.get("deferrals") or 0,
            "last_job_id": previous,
            "max_job_attempts": self.settings.max_job_attempts,
        }
        with self.engine.begin() as conn:
            moved = outbox.mark_failed(conn, op, previous, f"{previous}: {reason}; gave up after {outbox.lost_runs(row)} lost runs")
            if moved:
                outcomes.write_failed_for_review(conn, op, row["attempt_id"], row["kind"], detail)
                outcomes.audit(conn, "relay", "failed_for_review", detail)
        if moved:
            log.error("gave up on %s after %d attempts: %s", op, row["attempts"], reason)
            report.failed.append(op)

    def run_forever(self, stop: threading.Event) -> None:
        backoff = self.settings.relay_interval
        log.info("relay started (interval %.2fs, reconciler %s)", backoff, "on" if self.reconcile in self.passes else "off")
        while not stop.is_set():
            try:
                report = self.run_once()
                backoff = 0.0 if report.more_pending else self.settings.relay_interval
            except (RedisError, SQLAlchemyError) as exc:
                # Valkey down or full, or the ledger busy: keep looping, slower, until it is back;
                # the rows the pass could not send stay pending for the next one.
                backoff = min(max(backoff * 2, self.settings.relay_interval), _BACKOFF_MAX)
                process_stats().record_event("relay_failed_passes")
                log.error("relay pass failed (%s: %s); retrying in %.1fs", type(exc).__name__, exc, backoff)
            except Exception:
                backoff = min(max(backoff * 2, self.settings.relay_interval), _BACKOFF_MAX)
                log.exception("relay pass crashed; retrying in %.1fs", backoff)
            stop.wait(backoff)
        log.info("relay stopped")


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    apply_niceness("relay")  # stack.priority: 0 unless $PROCTOR_NICENESS says otherwise
    settings = load_settings()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stats = record_process_connections(settings)
    engine = make_engine(settings)
    redis = valkey_client(settings, "queue")
    # Alive for the final read's queue evidence: a pending row nobody will ever enqueue
    # (the relay dead) is stuck, not work in progress (stack/lanes/evidence.py).
    beat = LivenessBeat(redis, RELAY_LIVENESS, settings.liveness_ttl, on_lost=None)
    try:
        beat.beat()  # at once: the thread's first beat comes a third of a TTL later
    except RedisError as exc:
        log.warning("relay liveness not set yet (%s); the beat retries", exc)
    beat.start()
    try:
        Relay(settings, engine, redis).run_forever(stop)
    finally:
        beat.stop()
        redis.close()
        engine.dispose()
        stats.dump()
    return 0


if __name__ == "__main__":
    sys.exit(main())
