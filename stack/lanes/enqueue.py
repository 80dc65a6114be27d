"""Putting one enqueue of an operation on its lane: the one place job options live.

Both the web node (best effort, right after finish) and the relay (pending rows,
re-enqueues) call this, so the rules hold for every job: no ``ttl`` (an expiring
job hash is a silently dropped job), a job timeout that fits the lane, a bounded
failure TTL, and ``unique=True`` so that a repeat of the same enqueue is a no-op.
"""

from __future__ import annotations

import logging

from redis import Redis
from rq.exceptions import DuplicateJobError

from stack.config import Settings
from stack.lanes.jobs import job_timeout
from stack.lanes.queues import JOB_FUNCTION, job_id, lane_routes, queue_for

__all__ = ["FAILURE_TTL", "enqueue_operation"]

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
        queue_for(kind, redis, lane_routes(settings)).enqueue(
            JOB_FUNCTION[kind],
            op,
            job_id=jid,
            job_timeout=job_timeout(kind, settings),
            failure_ttl=FAILURE_TTL,
            description=jid,
            unique=True,
        )
    except DuplicateJobError:
        log.info("job %s already in Valkey; recording it", jid)
    return jid
