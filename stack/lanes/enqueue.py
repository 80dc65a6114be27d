"""Putting one enqueue of an operation on its lane: the one place job options live.

Both the web node (best effort, right after finish) and the relay (pending rows,
re-enqueues) call this, so the rules hold for every job: no ``ttl`` (an expiring
job hash is a silently dropped job), a job timeout that fits the lane, a bounded
failure TTL, and ``unique=True`` so that a repeat of the same enqueue is a no-op.

``enqueue_operations`` sends many enqueues in one Valkey pipeline (the relay's backlog
path): each job still goes through RQ's own atomic unique-enqueue script (check, save,
push), so a repeat stays a no-op and a job already running is never overwritten.
"""

from __future__ import annotations

import logging

from typing import Any, Iterable

from redis import Redis
from rq.exceptions import DuplicateJobError
from rq.job import Job, JobStatus
from rq.queue import Queue
from rq.scripts import _build_hset_args, get_unique_enqueue_script

from stack.config import Settings
from stack.lanes.jobs import job_timeout
from stack.lanes.queues import JOB_FUNCTION, JOB_SERIALIZER, job_id, lane_routes, queue_for

__all__ = ["FAILURE_TTL", "Enqueue", "enqueue_operation", "enqueue_operations"]

Enqueue = tuple[str, str, int]
"""(kind, operation_id, enqueue number): one enqueue of an operation."""

FAILURE_TTL = 7 * 86400
"""Keep RQ's failed-job evidence a week, not RQ's default year of Valkey memory."""

log = logging.getLogger("proctor.enqueue")


def enqueue_operation(redis: Redis, settings: Settings, kind: str, op: str, number: int) -> str:
    """Enqueue enqueue-number ``number`` of an operation; a job id that already exists counts as sent.

    ``unique=True`` makes a repeat (the web node's best-effort enqueue, or a resent
    command after a timeout) a no-op instead of a second copy of the id in the list.
    No ``ttl``: an expiring job hash is a silently dropped job.
    """
    jid = job_id(op, number)
    try:
        queue_for(kind, redis, lane_routes(settings)).enqueue_call(unique=True, **_job_options(kind, op, jid, settings))
    except DuplicateJobError:
        log.info("job %s already in Valkey; recording it", jid)
    return jid


def _job_options(kind: str, op: str, jid: str, settings: Settings) -> dict[str, Any]:
    return {
        "func": JOB_FUNCTION[kind],
        "args": (op,),
        "job_id": jid,
        "timeout": job_timeout(kind, settings),
        "failure_ttl": FAILURE_TTL,
        "description": jid,
    }


def enqueue_operations(redis: Redis, settings: Settings, items: Iterable[Enqueue]) -> list[str]:
    """Enqueue many operations in one pipeline (one round trip); their job ids, in order.

    Same job as ``enqueue_operation``, through the same RQ unique-enqueue script, one
    script call per job: a job id that already exists counts as sent and stays untouched.
    Returns only once Valkey answered for every job; if the pipeline fails, nothing is
    reported sent (a later repeat of the same ids is a no-op for those that landed).
    """
    routes, queues = lane_routes(settings), {}
    script = get_unique_enqueue_script(redis)
    jids: list[str] = []
    with redis.pipeline(transaction=False) as pipe:
        for kind, op, number in items:
            lane = routes[kind]
            queue = queues.setdefault(lane, Queue(lane, connection=redis, serializer=JOB_SERIALIZER))
            job = _queued_job(queue, _job_options(kind, op, job_id(op, number), settings))
            pipe.sadd(queue.redis_queues_keys, queue.key)
            script(keys=[job.key, queue.key], args=[job.id, "R", -1, *_build_hset_args(job)], client=pipe)
            jids.append(job.id)
        answers = pipe.execute()
    for jid, sent in zip(jids, answers[1::2]):
        if sent == 0:
            log.info("job %s already in Valkey; recording it", jid)
    return jids


def _queued_job(queue: Queue, options: dict[str, Any]) -> Job:
    """The job RQ's ``enqueue_call`` would save: created by the queue, stamped queued (no ttl)."""
    job = queue.create_job(status=JobStatus.QUEUED, **options)
    queue._prepare_for_queue(job)  # RQ's own stamping (origin, enqueued_at, timeout, status)
    return job
