"""Where each open outbox row's job is, read from Valkey: the final read's evidence of work in progress.

A row still ``pending`` or ``enqueued`` when a run's final read comes is either work a
lane is still doing or work that was lost. The ledger alone cannot tell the two apart;
the queues can. For each open row this reads (two pipelined round trips, never listing
RQ's started registry, which would run its abandoned-job cleanup here):

- for a ``pending`` row (no job in a lane yet): ``awaiting_relay`` when the relay may enqueue it
  now and the relay is alive (its liveness key), ``unrelayed`` when it may but no relay is alive
  to do it (dead, and nothing will bring it back before the read: the row is stuck), ``waiting``
  when it may not yet (its not-before time, its merit row not done, its lane paused);
- ``queued``: the job id waits in its lane's queue;
- ``dequeued``: a worker took it (it sits in the queue's intermediate list) and has not
  marked it started yet; but when every worker that RQ recorded an execution for (its main
  process records one before it forks the horse, the horse marks the job started) is dead,
  the job is ``abandoned``: a horse killed before its first write leaves the job in the
  intermediate list for good, and no live worker will start it;
- ``running``: its hash says ``started`` by a worker whose liveness key is alive;
- ``abandoned``: ``started`` by a worker whose liveness key is gone (the worker died);
- ``absent``: no job hash (never enqueued, or Valkey lost it);
- otherwise RQ's own status (``finished``, ``failed``, ``stopped``, ``canceled``...).

The harness judges the states (chaos/checkers/jobs.py): ``IN_PROGRESS`` are work in progress.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from redis import Redis
from rq.intermediate_queue import IntermediateQueue
from rq.executions import Execution, ExecutionRegistry
from rq.job import Job, JobStatus
from rq.queue import Queue

from stack.lanes.worker import RELAY_LIVENESS, liveness_key

__all__ = ["IN_PROGRESS", "job_states"]

IN_PROGRESS = ("awaiting_relay", "waiting", "queued", "dequeued", "running")


def job_states(redis: Redis, rows: Iterable[Mapping[str, Any]], routes: Mapping[str, str],
               enqueueable: set[str]) -> list[dict[str, Any]]:
    """One record per open outbox row: operation, kind, lane, row status, job id and its state.
    ``enqueueable``: the pending rows' operation ids that the relay may enqueue now."""
    rows = list(rows)
    lanes = sorted(set(routes.values()))
    pipe = redis.pipeline(transaction=False)
    for lane in lanes:
        key = Queue(lane, connection=redis).key
        pipe.lrange(key, 0, -1)
        pipe.lrange(IntermediateQueue.get_intermediate_queue_key(key), 0, -1)
    pipe.exists(liveness_key(RELAY_LIVENESS))
    *lists, relay_alive = pipe.execute()
    queued = {lane: {j.decode() for j in lists[2 * n]} for n, lane in enumerate(lanes)}
    dequeued = {lane: {j.decode() for j in lists[2 * n + 1]} for n, lane in enumerate(lanes)}
    jobs = [row["job_id"] for row in rows if row.get("job_id") and row["status"] != "pending"]
    fields = _job_fields(redis, jobs)
    taken = set().union(*dequeued.values())
    owners = _execution_workers(redis, [job for job in jobs if job in taken])
    named = {worker for status, worker in fields.values() if worker} | {w for ws in owners.values() for w in ws if w}
    alive = _alive_workers(redis, named)
    records = []
    for row in rows:
        lane = routes.get(row["kind"], row["kind"])
        job = row.get("job_id")
        if row["status"] == "pending":
            state = _pending_state(row["operation_id"] in enqueueable, bool(relay_alive))
        else:
            state = _state(job, queued.get(lane, set()), dequeued.get(lane, set()), fields.get(job or ""), alive)
            if state == "dequeued" and _owned_by_the_dead(owners.get(job or ""), alive):
                state = "abandoned"
        records.append({"operation_id": row["operation_id"], "kind": row["kind"], "lane": lane,
                        "status": row["status"], "job_id": job, "state": state})
    return records


def _pending_state(enqueueable: bool, relay_alive: bool) -> str:
    if not enqueueable:
        return "waiting"
    return "awaiting_relay" if relay_alive else "unrelayed"


def _job_fields(redis: Redis, jobs: list[str]) -> dict[str, tuple[str | None, str | None]]:
    pipe = redis.pipeline(transaction=False)
    for job in jobs:
        pipe.hmget(Job.key_for(job), "status", "worker_name")
    return {job: tuple(None if v is None else v.decode() for v in pair)  # type: ignore[misc]
            for job, pair in zip(jobs, pipe.execute())}


def _execution_workers(redis: Redis, jobs: list[str]) -> dict[str, list[str | None]]:
    """job -> the worker name of each execution RQ recorded for it (None: that execution's hash expired)."""
    pipe = redis.pipeline(transaction=False)
    for job in jobs:
        pipe.zrange(ExecutionRegistry(job_id=job, connection=redis).key, 0, -1)
    ids = {job: [i.decode() for i in found] for job, found in zip(jobs, pipe.execute())}
    pipe = redis.pipeline(transaction=False)
    for job, executions in ids.items():
        for execution in executions:
            pipe.hget(Execution(execution, job, redis).key, "worker_name")
    names = iter(pipe.execute())
    return {job: [_text(next(names)) for _ in executions] for job, executions in ids.items()}


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode()


def _owned_by_the_dead(workers: list[str | None] | None, alive: set[str]) -> bool:
    """Some worker took the job (an execution exists) and none of its workers is alive. No execution yet
    is the instant between a worker's BLMOVE and its bookkeeping: still in progress."""
    return bool(workers) and not any(worker in alive for worker in workers if worker)


def _alive_workers(redis: Redis, workers: set[str]) -> set[str]:
    ordered = sorted(workers)
    pipe = redis.pipeline(transaction=False)
    for worker in ordered:
        pipe.exists(liveness_key(worker))
    return {worker for worker, exists in zip(ordered, pipe.execute()) if exists}


def _state(job: str | None, queued: set[str], dequeued: set[str], fields: tuple[str | None, str | None] | None,
           alive: set[str]) -> str:
    if job is None:
        return "absent"
    if job in queued:
        return "queued"
    if job in dequeued:
        return "dequeued"
    status, worker = fields or (None, None)
    if status is None:
        return "absent"
    if status == JobStatus.STARTED.value:
        return "running" if worker in alive else "abandoned"
    return status
